"""Whole runs with mutated messages: every round is exact or aborted with the model unchanged.

``CodedSecAgg`` (around FedAvg) drives 4 silos, each a real ClientApp with ``coded_secagg_mod``,
over an in-process grid (``tests.unit.test_strategy_faults.FakeGrid``) for three rounds. Before
the run, Hypothesis plans one to three faults: at a stage (keys, train, recovery) of a round,
for one silo, the server's request or the silo's reply is mutated (bits, counts, truncation,
extension, a value of a field vector kept in the field), replaced (a replay of the silo's reply
of an earlier round, another silo's reply of this round), put in a broken record, or dropped.

The train function moves partition k by (k + 1)/64 with weight 512 of at most 1024, so every
quantized value is exact and a completed round moves the model by exactly
:math:`\\Delta = \\frac{1}{K}\\sum_k (k+1)/64`. Properties: ``start`` never raises (unless the
faults leave too few silos with keys to run at all, which it says); a completed round moves
the model by exactly Delta, an aborted one leaves it as it was; the final model is the one the
reports account for. A value changed inside a recovery reply is caught only by the range check,
with probability 1 - 2^-h per affected coordinate now that the mask-sharing points are
pseudo-random (``test_known_weaknesses``: 0 of 372 single-bit flips get through; with small
integer points 228 did): a round that completes wrong is allowed only then, and counted.
(An upload's value is caught by the parity check of the extra upload, or by the range check,
as documented.)
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import FedAvg
from hypothesis import given, settings
from hypothesis import strategies as st

from clients import coded_secagg_mod
from coded_fl.errors import ConfigurationError
from coded_fl.secagg.messages import HEADER_BYTES, peek_header
from coded_fl.vocabulary import FRAME_ARRAY, MSG_KEY, read_frame
from coded_fl_flower.records import framed_record
from strategies import CodedSecAgg
from tests.fuzz import examples, tally
from tests.fuzz.ends import flower_runtime
from tests.fuzz.mutants import fields
from tests.unit.test_strategy_faults import FakeGrid

N, D, ROUNDS = 4, 6, 3
DELTA = np.float32(np.mean([(k + 1) / 64 for k in range(N)]))
STAGES = {"KeyRequest": "keys", "TrainRequest": "train", "RecoveryRequest": "recovery"}
P = 2**31 - 1


@pytest.fixture(autouse=True, scope="module")
def _flower() -> Iterator[None]:
    with flower_runtime():
        yield


def _app() -> ClientApp:
    app = ClientApp(mods=[coded_secagg_mod])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        k = int(context.node_config["partition-id"])
        w = msg.content["arrays"]["w"].numpy()
        return Message(
            RecordDict(
                {
                    "arrays": ArrayRecord({"w": Array((w + (k + 1) / 64).astype(np.float32))}),
                    "metrics": MetricRecord({"num-examples": 512}),
                }
            ),
            reply_to=msg,
        )

    return app


@dataclass(frozen=True)
class Fault:
    """What goes wrong: at ``stage`` of round ``round`` (0: the key exchange), for ``silo``."""

    round: int
    stage: str
    silo: int
    target: str  # "request" or "reply"
    how: str
    seed: int


def _value_positions(raw: bytes) -> range:
    """Byte offsets of the field-vector values of an upload or a recovery reply."""
    kind = raw[4] if len(raw) > 4 else 0
    if kind == 4:  # Upload: masked length at 29, values after it
        return range(HEADER_BYTES + 4, HEADER_BYTES + 4 + struct.unpack_from("<I", raw, 29)[0])
    if kind == 6:  # RecoveryReply: rows, cols, values
        return range(HEADER_BYTES + 8, len(raw))
    return range(0)


def mutate(raw: bytes, how: str, rng: random.Random) -> tuple[bytes, str]:
    """``raw`` mutated as ``how`` says; returns it and a label (``value`` marks a change of a
    field-vector value that stays in the field: undetectable by the decoder, by design)."""
    out = bytearray(raw)
    if how == "value":
        pos = _value_positions(raw)
        if not pos:
            how = "flip"
        else:
            at = pos.start + 4 * rng.randrange(len(pos) // 4)
            v = struct.unpack_from("<I", out, at)[0]
            struct.pack_into("<I", out, at, (v + rng.randrange(1, P)) % P)
            return bytes(out), "value"
    if how == "count":
        spots = [f for f in fields(raw) if f.kind != "id"]
        if spots:
            f = rng.choice(spots)
            value = rng.choice([0, 1, N + 1, 2**31, 2**32 - 1])
            struct.pack_into("<I", out, f.offset, value)
            return bytes(out), f"count:{f.name}"
        how = "flip"
    if how == "flip":
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
        return bytes(out), "flip@value" if i in _value_positions(raw) else "flip"
    if how == "truncate":
        return bytes(out[: rng.randrange(len(out))]), how
    return bytes(out) + rng.randbytes(rng.randrange(1, 32)), "extend"


@dataclass
class FuzzGrid(FakeGrid):
    """FakeGrid whose silos' messages suffer the planned faults."""

    faults: tuple[Fault, ...] = ()
    done: list[tuple[Fault, str]] = field(default_factory=list)
    history: dict[tuple[str, int], list[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.inner = _app()
        self.app = self._call  # type: ignore[assignment]

    def _call(self, msg: Message, ctx: Context) -> Message:
        site = int(ctx.node_config["site"])
        raw = read_frame(msg.content, MSG_KEY) if MSG_KEY in msg.content else None
        if raw is None:
            return self.inner(msg, ctx)
        head = peek_header(raw)
        stage = STAGES.get(head.type.__name__, "?")
        todo = [f for f in self.faults if (f.round, f.stage, f.silo) == (head.round, stage, site)]
        original = msg.content[MSG_KEY]
        for f in todo:
            if f.target == "request":
                new, label = mutate(raw, f.how, random.Random(f.seed))
                msg.content[MSG_KEY] = framed_record([new])
                self.done.append((f, f"request:{label}"))
        try:
            reply = self.inner(msg, ctx)
        finally:  # the grid's own bookkeeping reads what the server sent
            msg.content[MSG_KEY] = original
        ok = not reply.has_error() and MSG_KEY in reply.content
        got = read_frame(reply.content, MSG_KEY) if ok else None
        if got is not None:
            self.history.setdefault((stage, site), []).append(got)
        for f in todo:
            if f.target != "reply" or got is None:
                continue
            rng = random.Random(f.seed)
            label = f.how
            if f.how == "drop":
                reply = Message(Error(code=0, reason="fuzz: dropped"), reply_to=msg)
                self.done.append((f, "reply:drop"))
                continue
            if f.how == "record":
                junk = Array(dtype="uint8", shape=(3,), stype="numpy.ndarray", data=b"junk")
                new_content = RecordDict({MSG_KEY: ArrayRecord({FRAME_ARRAY: junk})})
                reply = Message(new_content, reply_to=msg)
                self.done.append((f, "reply:record"))
                continue
            if f.how == "replay":
                earlier = self.history.get((stage, site), [])[:-1]
                new = rng.choice(earlier) if earlier else got
            elif f.how == "swap":
                others = [
                    h[-1] for (s, o), h in self.history.items() if s == stage and o != site and h
                ]
                new = rng.choice(others) if others else got
            else:
                new, label = mutate(got, f.how, rng)
            reply.content[MSG_KEY] = framed_record([new])
            self.done.append((f, f"reply:{label}"))
        return reply


@st.composite
def faults(draw: st.DrawFn) -> tuple[Fault, ...]:
    out = []
    for _ in range(draw(st.integers(1, 3))):
        r = draw(st.integers(0, ROUNDS))
        stage = "keys" if r == 0 else draw(st.sampled_from(["train", "recovery"]))
        target = draw(st.sampled_from(["request", "reply", "reply"]))
        how = draw(
            st.sampled_from(
                ["value", "value", "count", "flip", "truncate", "extend"]
                + (["replay", "swap", "record", "drop"] if target == "reply" else [])
            )
        )
        out.append(Fault(r, stage, draw(st.integers(0, N - 1)), target, how, draw(st.integers())))
    return tuple(out)


def _strategy() -> CodedSecAgg:
    return CodedSecAgg(
        FedAvg(fraction_evaluate=0.0, min_available_nodes=N, min_train_nodes=N),
        num_silos=N,
        num_stragglers=1,
        privacy_threshold=1,
        max_weight=1024.0,
        extra_replies=1,
        extra_wait=0.05,
        round_timeout=0.5,
        recovery_timeout=0.3,
        key_timeout=0.3,
        node_wait_timeout=1.0,
        evaluate_timeout=0.1,
        poll_interval=0.001,
        progress=lambda r: None,
        max_aborted_rounds=0,  # every planned round runs, whatever the faults did to earlier ones
    )


@settings(max_examples=examples(12, long=1000))
@given(plan=faults())
def test_rounds_are_exact_or_aborted_with_the_model_unchanged(plan: tuple[Fault, ...]) -> None:
    grid = FuzzGrid(N, faults=plan)
    strategy = _strategy()
    init = ArrayRecord({"w": Array(np.zeros(D, dtype=np.float32))})
    try:
        result = strategy.start(grid=grid, initial_arrays=init, num_rounds=ROUNDS)
    except ConfigurationError as exc:
        key_faults = {f.silo for f in plan if f.stage == "keys"}
        assert len(key_faults) >= 2, f"the run stopped: {exc} ({grid.done})"
        tally.record("round", "run", "round:not started (too few keys)", "")
        return
    model = np.zeros(D, dtype=np.float32)
    for rep in strategy.reports:
        # faults of the key exchange (round 0) and of earlier rounds bear on this one too
        labels = sorted(
            label if f.round == rep.round else f"{'keys' if not f.round else 'earlier'}:{label}"
            for f, label in grid.done
            if f.round <= rep.round
        )
        if rep.ok:
            assert rep.arrays is not None
            got = rep.arrays["w"].numpy()
            if not np.array_equal(got, model + DELTA):
                # only a value inside a recovery reply may get through the range check, with
                # probability about 2^-h per affected coordinate (see test_known_weaknesses)
                by_design = any(
                    (f.stage, f.target) == ("recovery", "reply") and "value" in label
                    for f, label in grid.done
                    if f.round == rep.round
                )
                assert by_design, f"round {rep.round} completed wrong: {labels} {rep.line()}"
                tally.record("round", "run", "round:wrong, undetected", ",".join(labels))
            else:
                tally.record("round", "run", "round:exact", ",".join(labels) or "no fault")
            model = got
        else:
            # every aborted round says why as a typed code (not only in words)
            assert rep.abort_code is not None, rep.line()
            why = rep.abort_code.value
            tally.record("round", "run", "round:aborted", f"[{why}] " + (",".join(labels) or "-"))
    assert np.array_equal(result.arrays["w"].numpy(), model), "the model moved in an aborted round"
