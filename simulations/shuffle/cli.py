"""One coded shuffle over K simulated silos, on real bytes: in one process, or through Flower.

``python -m simulations.shuffle --silos 4 --units 8 --storage 2 [--decentralized] [--data DIR]``
``python -m simulations.shuffle --flower [...]``: the same shuffle through a Flower simulation
(K + 1 SuperNodes on Ray: the K silos and the central sender; the server relays ciphertext
under the silos' group key; see ``simulations/shuffle/flower.py``).

Units are the files of ``--data DIR`` (sorted by name; the first ``--units`` of them) or random
bytes. Each silo gets a temporary directory store, filled for the current epoch (its batch in
full plus the level-t cache); the shuffle then moves every batch to the next silo (the worst case:
no silo keeps anything), or to a random new split with ``--random``. Prints the plan, the bytes
moved coded vs uncoded and the theoretical loads, and checks every store byte for byte.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from coded_fl.shuffling import (
    Mode,
    UnitManifest,
    UnitStore,
    batch_assignment,
    centralized_lower_bound,
    digest,
    install_silo,
    plan_shuffle,
    shifted_assignment,
    storage_for_level,
    worst_case_loads,
)
from simulations.runtime.shuffle_harness import simulate


def _units(args: argparse.Namespace, rng: np.random.Generator) -> dict[str | int, bytes]:
    if args.data:
        files = sorted(p for p in Path(args.data).iterdir() if p.is_file())[: args.units]
        if len(files) < args.units:
            raise SystemExit(
                f"--data {args.data} has {len(files)} files, --units asks {args.units}"
            )
        return {p.name: p.read_bytes() for p in files}
    return {u: rng.bytes(args.unit_bytes) for u in range(args.units)}


def _kb(n: float) -> str:
    return f"{n / 1e3:,.1f} kB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulations.shuffle", description=__doc__)
    ap.add_argument("--silos", "-K", type=int, default=4, help="number of silos K")
    ap.add_argument("--units", "-N", type=int, default=8, help="number of units N")
    ap.add_argument("--storage", "-t", type=int, default=1, help="storage level t in 0..K")
    ap.add_argument("--decentralized", action="store_true", help="silos send to each other")
    ap.add_argument("--random", action="store_true", help="random reassignment, not worst case")
    ap.add_argument("--data", help="directory whose files are the units")
    ap.add_argument("--unit-bytes", type=int, default=65536, help="size of random units")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-key", action="store_true", help="do not encrypt (integrity tags only)")
    ap.add_argument(
        "--flower",
        action="store_true",
        help="run through a Flower simulation (the server relays; the silos agree on the key)",
    )
    ap.add_argument("--actors", type=int, default=2, help="Ray actors with --flower")
    args = ap.parse_args(argv)
    if args.flower and args.no_key:
        ap.error("--flower always encrypts under the silos' group key; drop --no-key")
    K, t = args.silos, args.storage
    mode: Mode = "decentralized" if args.decentralized else "centralized"
    rng = np.random.default_rng(args.seed)
    data = _units(args, rng)
    ids = list(data)
    now = batch_assignment(ids, K, rng=rng)
    nxt = batch_assignment(ids, K, rng=rng) if args.random else shifted_assignment(now, K)
    q = len(ids) / K
    manifest = UnitManifest.from_data(data)
    key = None if args.no_key else os.urandom(32)  # the organisation's group key in deployment
    storage = storage_for_level(K, t, -(-len(ids) // K), len(ids))
    if args.flower:
        return _flower(args, data, now, nxt, storage)
    with tempfile.TemporaryDirectory(prefix="codedfl-shuffle-") as tmp:
        plan0 = plan_shuffle(manifest, now, nxt, K=K, t=t, mode=mode, storage=storage)
        uncoded = plan_shuffle(manifest, now, nxt, K=K, t=t, mode=mode, coded=False)
        stores = [UnitStore(Path(tmp) / f"silo{k}") for k in range(K)]
        for k in range(K):
            install_silo(plan0, k, data, stores[k], epoch=0)
        t0 = time.perf_counter()
        out = simulate(
            data, now, nxt, K=K, t=t, mode=mode, storage=storage, group_key=key, stores=stores
        )
        elapsed = time.perf_counter() - t0
        plan = out.plan
        ok = all(r.complete for r in out.reports) and all(
            set(stores[k].units()) == {u for u in ids if k in nxt[u]}
            and all(stores[k].read_unit(u) == data[u] for u in stores[k].units())
            for k in range(K)
        )
    s = plan.summary()
    print(
        f"coded data shuffling: K={K} silos, N={len(ids)} units (q={q:g}), storage level t={t} "
        f"(M={storage:g} units/silo), {mode}, {'random' if args.random else 'worst-case'} "
        f"reassignment, {'AES-GCM sealed' if key else 'integrity tags only'}"
    )
    print(
        f"plan {s['plan_id'][:16]}: {s['messages']} messages of {s['message_bytes']} B "
        f"(units padded to {plan.layout.unit_size} B: {plan.layout.n_subfiles} subfiles x "
        f"{plan.layout.n_pieces} pieces, padding +{plan.layout.padding_overhead(manifest):.1%}); "
        f"{s['units_to_receive']} units to receive"
    )
    for k in range(K):
        sent = int((plan.msg_sender == k).sum())
        got = len(plan.messages_to(k))
        print(f"  silo {k}: receives {len(plan.needs[k])} units from {got} messages, sends {sent}")
    if mode == "centralized":
        print(f"  central sender: sends {int((plan.msg_sender == -1).sum())} messages")
    padded = plan.layout.unit_size
    print(
        f"bytes moved: coded {_kb(out.payload_bytes)} payload ({_kb(out.wire_bytes)} on the "
        f"wire), uncoded {_kb(uncoded.bytes_moved)}, "
        f"whole units {_kb(s['units_to_receive'] * padded)}"
    )
    print(
        f"load (units): coded {plan.load:.4g}, scheme formula {plan.formula_load():.4g}, "
        f"uncoded {uncoded.load:.4g}"
    )
    if q.is_integer():
        w = worst_case_loads(K, t, int(q))
        print(
            f"theory, worst case (q={q:g}): uncoded q(K-t) = {w['uncoded']:.4g}, centralized "
            f"q(K-t)/(t+1) = {w['centralized']:.4g}, decentralized q(K-t)/t = "
            f"{w['decentralized']:.4g}, "
            f"lower bound {centralized_lower_bound(K, q, w['storage']):.4g}"
        )
    print(f"delivery + verification + store commit: {elapsed * 1e3:.1f} ms")
    print(f"every silo decoded exactly its units (SHA-256 checked, stores committed): {ok}")
    for r in out.reports:
        if not r.complete:
            print(f"  silo {r.silo}: missing {r.missing}, failed {r.failed}")
    return 0 if ok else 1


def _flower(
    args: argparse.Namespace,
    data: dict[str | int, bytes],
    now: dict[str | int, frozenset[int]],
    nxt: dict[str | int, frozenset[int]],
    storage: float,
) -> int:
    from simulations.shuffle.flower import Epoch, leaked, run_flower_shuffle

    K, t = args.silos, args.storage
    mode: Mode = "decentralized" if args.decentralized else "centralized"
    with tempfile.TemporaryDirectory(prefix="codedfl-shuffle-flower-") as tmp:
        run = run_flower_shuffle(
            data,
            [Epoch(mode, now, nxt)],
            K=K,
            t=t,
            store_root=tmp,
            storage=storage,
            actors=args.actors,
        )
        res = run.results[0]
        exact = all(
            set(run.stores[k].units()) == {u for u in data if k in nxt[u]}
            and all(run.stores[k].read_unit(u) == data[u] for u in run.stores[k].units())
            for k in range(K)
        )
    secrets = {f"unit {u!r}": b for u, b in data.items()}
    secrets |= {f"SHA-256 of unit {u!r}": digest(b) for u, b in data.items()}
    seen = leaked(run.relayed_bytes, secrets)
    print(
        f"coded data shuffling through Flower: K={K} silos + a central sender ({K + 1} "
        f"SuperNodes, {args.actors} Ray actors), N={len(data)} units, t={t} (M={storage:g} "
        f"units/silo), {mode}, {'random' if args.random else 'worst-case'} reassignment"
    )
    for line in res.lines():
        print(line)
    print(f"simulation: {run.seconds:.1f} s (Ray start-up included)")
    print(
        f"the server handled {sum(map(len, run.relayed_bytes)):,} B; plaintext of a unit or a "
        f"unit's SHA-256 among them: {', '.join(seen) if seen else 'none'}"
    )
    ok = res.ok and exact and not seen
    print(f"every silo's store holds exactly its new units (SHA-256 checked): {exact}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
