"""CodedSecAgg against deployment faults, in process: a restarted silo is rekeyed before the
next round (keys once per run otherwise), a silo that lost its keys says so and is rekeyed, a
tampered share is refused and its sender named, and every round takes two round trips.

The grid runs each silo's real ClientApp (with ``coded_secagg_mod``) synchronously, so the
Flower adapters and the protocol machines are exercised end to end without Flower's runtime.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from flwr.app import (
    Array,
    ArrayRecord,
    Context,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from clients import coded_secagg_mod
from coded_fl.errors import ConfigurationError
from coded_fl.secagg.client import NEEDS_KEYS
from coded_fl.secagg.messages import Upload
from coded_fl_flower.records import message_from, message_record
from simulations.deploy.tamper import forge_shares
from strategies import CodedSecAgg

D = 16


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's Message() reads the process's task identity (set by its runtime)."""
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 7)
    monkeypatch.setattr(TaskIdentity, "_node_id", 1)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


def _client_app(tamper: dict[str, int]) -> ClientApp:
    def tamper_mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
        reply = call_next(msg, context)
        site = int(context.node_config["site"])
        if site != tamper.get("site", -1) or reply.has_error():
            return reply
        up = message_from(reply.content)
        if not isinstance(up, Upload):
            return reply
        if "garble" in tamper:  # a reply the server cannot even read (bad npy or stype)
            stype = "numpy.ndarray" if tamper["garble"] == 0 else "no-such-stype"
            junk = Array(dtype="uint8", shape=(3,), stype=stype, data=b"garbage")
            reply.content["codedfl.msg"] = ArrayRecord({"msg": junk})
            return reply
        forged = forge_shares(up, target=tamper["target"])
        reply.content["codedfl.msg"] = message_record(forged)
        return reply

    app = ClientApp(mods=[tamper_mod, coded_secagg_mod])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        k = int(context.node_config["partition-id"])
        w = msg.content["arrays"]["w"].numpy()
        step = float(context.node_config.get("test-step", 0.01))
        # a site whose replicas differ: another CPU (tiny offsets) or a deviating silo (large)
        offset = float(context.node_config.get(f"test-offset-{context.node_config['site']}", 0))
        new = (w + step * (k + 1) + offset).astype(np.float32)
        return Message(
            RecordDict(
                {
                    "arrays": ArrayRecord({"w": Array(new)}),
                    "metrics": MetricRecord(
                        {"num-examples": int(context.node_config.get("test-examples", 10))}
                    ),
                }
            ),
            reply_to=msg,
        )

    return app


@dataclass
class _Run:
    run_id: int = 7


@dataclass
class _NodeInfo:
    node_id: int
    last_activated_at: str


@dataclass
class FakeGrid(Grid):
    """Every silo's ClientApp runs when a message is pushed; replies wait to be pulled."""

    n: int
    tamper: dict[str, int] = field(default_factory=dict)
    #: extra node config of every node
    node_config: dict[str, object] = field(default_factory=dict)
    contexts: dict[int, Context] = field(default_factory=dict)
    activated: dict[int, str] = field(default_factory=dict)
    replies: dict[str, Message] = field(default_factory=dict)
    pushed: list[tuple[int, str]] = field(default_factory=list)
    #: called before each push batch (to inject faults between stages)
    before_push: list = field(default_factory=list)
    _ids: Iterable[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.app = _client_app(self.tamper)
        for i in range(self.n):
            self.restart(100 + i, stamp="t0")

    def restart(self, node: int, *, stamp: str) -> None:
        i = node - 100
        self.contexts[node] = Context(
            run_id=7,
            node_id=node,
            node_config={
                "partition-id": i,
                "num-partitions": self.n,
                "site": i,
                **self.node_config,
            },
            state=RecordDict(),
            run_config={},
        )
        self.activated[node] = stamp

    @property
    def run(self):  # type: ignore[no-untyped-def]
        return _Run()

    def set_run(self, run_id: int) -> None:  # type: ignore[override]
        pass

    def create_message(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def get_node_ids(self) -> Iterable[int]:
        return sorted(self.contexts)

    def get_nodes(self):  # type: ignore[no-untyped-def]
        return [_NodeInfo(n, self.activated[n]) for n in sorted(self.contexts)]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        for hook in list(self.before_push):
            hook(self)
        ids = []
        for msg in messages:
            mid = f"m{next(self._ids)}"  # type: ignore[call-overload]
            msg.metadata.__dict__["_message_id"] = mid
            node = msg.metadata.dst_node_id
            ctx = self.contexts[node]
            try:
                reply = self.app(msg, ctx)
            except Exception as exc:  # what Flower's runtime does with a raising ClientApp
                reply = Message(Error(code=0, reason=f"{type(exc)}:<'{exc}'>"), reply_to=msg)
            reply.metadata.__dict__["_reply_to_message_id"] = mid
            self.replies[mid] = reply
            kind = (
                message_from(msg.content).__class__.__name__ if "codedfl.msg" in msg.content else ""
            )
            self.pushed.append((node, kind))
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # type: ignore[override]
        # in push order, whatever the order of the ids asked for (deterministic tests)
        found = sorted((m for m in set(message_ids) if m in self.replies), key=lambda m: int(m[1:]))
        return [self.replies.pop(m) for m in found]

    def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
        return self.pull_messages(self.push_messages(messages))


def _strategy(
    n: int,
    *,
    extra: int = 0,
    max_weight: float | None = None,
    adaptive_clip: bool = True,
    masking: str = "shares",
    s: int = 1,
    extra_wait: float = 0.0,
    **settings: object,
) -> CodedSecAgg:
    return CodedSecAgg(
        FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n),
        num_silos=n,
        max_weight=max_weight,
        adaptive_clip=adaptive_clip,
        masking=masking,
        num_stragglers=s,
        privacy_threshold=1,
        extra_replies=extra,
        extra_wait=extra_wait,
        round_timeout=5.0,
        recovery_timeout=5.0,
        key_timeout=5.0,
        node_wait_timeout=5.0,
        poll_interval=0.001,
        progress=lambda r: None,
        **settings,  # type: ignore[arg-type]
    )


def _start(strategy: CodedSecAgg, grid: FakeGrid, rounds: int) -> None:
    init = ArrayRecord({"w": Array(np.zeros(D, dtype=np.float32))})
    strategy.start(grid=grid, initial_arrays=init, num_rounds=rounds)


def test_keys_once_per_run_and_two_round_trips() -> None:
    grid = FakeGrid(4)
    s = _strategy(4)
    _start(s, grid, 3)
    assert [r.ok for r in s.reports] == [True] * 3
    assert [r.round_trips for r in s.reports] == [2, 2, 2]
    assert s.key_exchanges == [(1, (0, 1, 2, 3))]
    assert sum(kind == "KeyRequest" for _, kind in grid.pushed) == 4
    # the upload beyond n - s came in the same pull as the one that closed the round: it is
    # time-stamped as late, not lost (the run does not wait for it at the end)
    assert sorted(s.late_train) == [1, 2, 3]


def restart_before_push(grid: FakeGrid, node: int, push: int) -> None:
    """Restart ``node`` (its state lost) just before the grid's ``push``-th push batch."""
    pushes: list[int] = []

    def hook(g: FakeGrid) -> None:
        pushes.append(1)
        if len(pushes) == push:
            g.restart(node, stamp="t1")

    grid.before_push.append(hook)


def test_restarted_silo_is_rekeyed_before_the_next_round() -> None:
    grid = FakeGrid(4)
    s = _strategy(4)
    # pushes: keys, train 1, recovery 1, then round 2 begins: restart node 102 first
    restart_before_push(grid, 102, 4)
    _start(s, grid, 3)
    assert all(r.ok for r in s.reports)
    assert s.key_exchanges == [(1, (0, 1, 2, 3)), (3, (2,))]
    # round 2 ran without new keys for silo 2 (restarted just before its train request was
    # pushed): it said it had none; round 3 began with its rekey (one more round trip)
    assert NEEDS_KEYS in s.reports[1].errors[2]
    assert s.reports[2].rekeyed == (2,) and s.reports[2].round_trips == 3
    assert 2 not in s.reports[2].errors and s.reports[2].replies_used == 3


def test_restart_seen_by_activation_time_is_rekeyed_without_a_failed_round() -> None:
    grid = FakeGrid(4)
    s = _strategy(4)
    rounds_seen: list[int] = []

    def progress(r):  # type: ignore[no-untyped-def]
        rounds_seen.append(r.round)
        if r.round == 1:  # between rounds 1 and 2 the SuperNode of silo 1 restarts
            grid.restart(101, stamp="t1")

    s.progress = progress
    _start(s, grid, 3)
    assert all(r.ok for r in s.reports) and rounds_seen == [1, 2, 3]
    assert s.key_exchanges == [(1, (0, 1, 2, 3)), (2, (1,))]
    assert s.reports[1].rekeyed == (1,) and not s.reports[1].errors
    assert [r.round_trips for r in s.reports] == [2, 3, 2]


@pytest.mark.parametrize("extra", [0, 1])
def test_tampered_share_is_refused_and_its_sender_named(extra: int) -> None:
    # silo 0 alters the share it seals for silo 1; silo 1 refuses it and names silo 0; the
    # server asks silo 0 to reveal the share's key (one more round trip), the share does not
    # open, and silo 0 is named and left out of the later rounds
    grid = FakeGrid(4, tamper={"site": 0, "target": 1})
    s = _strategy(4, extra=extra)
    _start(s, grid, 2)
    for rep in s.reports:
        assert rep.round_trips == (3 if rep.accused else 2)
        if 0 in rep.errors or 1 not in rep.errors:
            continue
        assert rep.errors[1].startswith("silo 0:")  # silo 1 refused the share silo 0 sealed
        assert "silo 0" in rep.accused[0] and "silo 1" in rep.accused[0]
        assert "accused" in rep.line() and "silo 0 lied" in rep.accused[0]
        assert 0 in rep.offenders
    assert any(0 in rep.accused for rep in s.reports)
    # the unauthenticated share never reaches a sum: a round either aborted or was decoded
    # without silo 1's recovery reply
    for rep in s.reports:
        if rep.ok:
            assert rep.responders >= 1


def test_a_silo_whose_shares_fail_everywhere_is_dropped_and_rounds_complete() -> None:
    # silo 0 garbles every share it seals: silos 1, 2, 3 accuse it, the evidence convicts it
    # (one round trip for the reveals), the server drops it from S and asks the three again
    # within the round (one more); it is an offender from then on: rounds 2 and 3 leave it
    # out. Before: every round aborted, because silo 0 stayed in S and no survivor could
    # answer
    grid = FakeGrid(4, tamper={"site": 0, "target": -1})
    # S = all four silos (the fourth upload completes the collection)
    s = _strategy(4, extra=1, extra_wait=5.0)
    _start(s, grid, 3)
    assert [r.ok for r in s.reports] == [True, True, True], [r.reason for r in s.reports]
    assert [r.round_trips for r in s.reports] == [4, 2, 2]
    assert s.reports[0].suspects == (0,) and s.reports[0].replies_used == 3
    assert set(s.reports[0].accused) == {0} and 0 in s.reports[0].offenders
    assert "named an offender" in s.reports[1].errors[0]
    assert "named an offender" in s.reports[2].errors[0]


def test_a_second_start_is_a_run_of_its_own() -> None:
    # run 1 ends with silo 2 waiting for a rekey (it restarted and refused round 2 with
    # NEEDS_KEYS); run 2 on the same wrapper must not inherit that, nor run 1's reports,
    # late uploads or key exchanges
    grid = FakeGrid(4)
    s = _strategy(4)
    pushes: list[int] = []

    def restart_before_round_2(g: FakeGrid) -> None:
        pushes.append(1)
        if len(pushes) == 4:  # keys, train 1, recovery 1, then round 2's train request
            g.restart(102, stamp="t1")

    grid.before_push.append(restart_before_round_2)
    _start(s, grid, 2)
    assert NEEDS_KEYS in s.reports[1].errors[2]
    first_run = s.run_id
    grid.before_push.clear()
    _start(s, grid, 3)
    assert [r.round for r in s.reports] == [1, 2, 3]
    assert all(r.ok and not r.rekeyed and not r.errors for r in s.reports)
    assert s.key_exchanges == [(1, (0, 1, 2, 3))]
    assert sorted(s.late_train) == [1, 2, 3]
    assert all(len(v) == 1 for v in s.late_train.values())  # one late upload a round, run 2's
    assert s.run_id != first_run  # the same Flower run, but seeds derive from the session


@pytest.mark.parametrize("garble", [0, 1])
def test_an_unreadable_reply_makes_its_silo_a_straggler_and_the_run_goes_on(garble: int) -> None:
    # silo 0's uploads cannot be deserialised (garbled npy payload, unknown stype): every
    # round completes from the other three, and silo 0's error says what was wrong
    grid = FakeGrid(4, tamper={"site": 0, "garble": garble})
    s = _strategy(4)
    _start(s, grid, 2)
    assert [r.ok for r in s.reports] == [True, True]
    for rep in s.reports:
        assert 0 in rep.stragglers and "codedfl.msg" in rep.errors[0]


def test_silos_refuse_a_configuration_below_their_minimum_and_the_server_says_so() -> None:
    # every node pins T >= 2 in its node config; the server asks for T = 1
    grid = FakeGrid(4, node_config={"codedfl.min-privacy-threshold": 2})
    s = _strategy(4)
    with pytest.raises(ConfigurationError, match=r"codedfl.min-privacy-threshold"):
        _start(s, grid, 1)


def test_flower_output_is_kept_and_the_round_line_shows_the_server_side_accuracy() -> None:
    import logging

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Keep()
    logging.getLogger("flwr").addHandler(handler)
    try:
        grid = FakeGrid(4)
        s = _strategy(4)
        init = ArrayRecord({"w": Array(np.zeros(D, dtype=np.float32))})
        s.start(
            grid=grid,
            initial_arrays=init,
            num_rounds=2,
            evaluate_fn=lambda r, arrays: MetricRecord({"accuracy": 0.25 * r, "eval_acc": 0.0}),
        )
    finally:
        logging.getLogger("flwr").removeHandler(handler)
    for expected in ("Starting CodedSecAgg strategy:", "[ROUND 2/2]", "Global evaluation"):
        assert expected in lines
    assert "Final results:" in lines
    rep = s.reports[1]
    assert rep.server_metrics == {"accuracy": 0.5, "eval_acc": 0.0}  # as named, no prefix
    assert "accuracy=0.5000" in rep.line()


def test_a_setting_that_stops_every_round_stops_the_run_after_the_first() -> None:
    # every partition has 5000 examples, more than max_weight = 1000: no round can complete,
    # so the run stops after round 1 with the silos' reason instead of aborting every round
    grid = FakeGrid(4, node_config={"test-examples": 5000})
    s = _strategy(4, max_weight=1000.0)  # a fixed bound: the user's setting
    with pytest.raises(ConfigurationError, match=r"cannot complete.*max_weight=1000"):
        _start(s, grid, 3)
    assert len(s.reports) == 1 and not s.reports[0].ok


def test_one_misconfigured_silo_is_only_a_straggler() -> None:
    grid = FakeGrid(4)
    grid.contexts[100].node_config["test-examples"] = 5000  # silo 0 alone (s = 1)
    s = _strategy(4, max_weight=1000.0)
    _start(s, grid, 2)
    assert all(r.ok for r in s.reports)
    assert all(0 in r.stragglers and "max_weight" in r.errors[0] for r in s.reports)


def test_the_automatic_weight_bound_rises_to_real_dataset_sizes_and_the_round_completes() -> None:
    # every partition has 50,000 examples (CIFAR-10 over one silo), no max_weight given: round 1
    # is refused for the bound (1,024), rerun at once with the 65,536 the silos asked for, and
    # completes; later rounds start there. The weighted average is exact: every partition has
    # the same weight, so it is the plain mean of 0.01 (k + 1) over k = 0..3 = 0.025.
    grid = FakeGrid(4, node_config={"test-examples": 50_000})
    s = _strategy(4)
    _start(s, grid, 2)
    assert [r.ok for r in s.reports] == [True, True], [r.reason for r in s.reports]
    assert s._run is not None and s._run.weight_bound == 65_536
    assert s.reports[0].round_trips == 3 and s.reports[1].round_trips == 2  # one rerun
    assert s.reports[0].total_weight == pytest.approx(4 * 50_000, rel=1e-4)
    final = s.reports[-1].arrays
    assert final is not None
    np.testing.assert_allclose(final["w"].numpy(), 0.05, atol=1e-4)  # two rounds of +0.025


def test_one_silo_that_asks_for_a_larger_bound_alone_is_a_straggler_and_nothing_reruns() -> None:
    grid = FakeGrid(4)
    grid.contexts[100].node_config["test-examples"] = 5000  # silo 0 alone (s = 1)
    s = _strategy(4)
    _start(s, grid, 2)
    assert all(r.ok for r in s.reports)
    assert all(r.round_trips == 2 and 0 in r.stragglers for r in s.reports)
    assert "automatic weight bound" in s.reports[0].errors[0]
    assert s._run is not None and s._run.weight_bound == 1024


def test_a_round_that_clips_is_rerun_with_a_wider_range_and_matches_fedavg_exactly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 1,000 examples per partition (rho = 1000/1024) and partition k moves every entry by
    # 2 (k + 1): up to 7.8 after weighting, beyond clip_range 1. Round 1 clips at 1 and at 4,
    # is discarded both times (the model unchanged, the wrapped strategy never sees it) and
    # completes at 16; round 2 starts there. FedAvg's average is the mean of 2 (k + 1) = 5.
    # clip_quorum=1: at 4 only partitions 2 and 3 clip, below the default quorum of 3
    grid = FakeGrid(4, node_config={"test-examples": 1000, "test-step": 2.0})
    s = _strategy(4, clip_quorum=1)
    with caplog.at_level("INFO", logger="flwr"):
        _start(s, grid, 2)
    assert [r.ok for r in s.reports] == [True, True], [r.reason for r in s.reports]
    assert s._run is not None and s._run.delta_scale == 16.0 and s._run.round_offset == 2
    assert [r.clip_range for r in s.reports] == [16.0, 16.0]
    assert [r.clipped_fraction for r in s.reports] == [0.0, 0.0]
    assert s.reports[0].round_trips == 6 and s.reports[1].round_trips == 2  # two reruns
    final = s.reports[-1].arrays
    assert final is not None
    step = 16.0 / 2.0**14  # the quantization step at g = 16 bounds the error (loosely)
    np.testing.assert_allclose(final["w"].numpy(), 10.0, atol=step)
    assert "clip range widened to 4" in caplog.text and "clip range widened to 16" in caplog.text


def test_a_rerun_round_counts_the_time_of_its_discarded_attempts() -> None:
    # every push waits 50 ms: round 1 pushes 6 times (3 attempts x train + recovery), round 2
    # twice, so round 1's figures (from its first attempt) are at least 0.3 s, not only the
    # last attempt's 0.1 s (lower bounds from the injected waits; nothing here times the code)
    grid = FakeGrid(4, node_config={"test-examples": 1000, "test-step": 2.0})
    grid.before_push.append(lambda g: time.sleep(0.05))
    s = _strategy(4, clip_quorum=1)
    _start(s, grid, 2)
    assert [r.round_trips for r in s.reports] == [6, 2]
    assert s.reports[0].seconds >= 0.3 and s.reports[0].close_seconds >= 0.25
    assert s.reports[1].seconds >= 0.1


def test_without_adaptive_clip_the_round_clips_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    grid = FakeGrid(4, node_config={"test-examples": 1000, "test-step": 2.0})
    s = _strategy(4, adaptive_clip=False)
    with caplog.at_level("INFO", logger="flwr"):
        _start(s, grid, 1)
    (rep,) = s.reports
    assert rep.ok and rep.round_trips == 2 and rep.clip_range == 1.0
    assert rep.clipped_fraction == pytest.approx(1.0, abs=1e-6)  # every entry of every partition
    final = rep.arrays
    assert final is not None  # rho (theta_k - theta) clipped to 1 in each partition: 4 / (4 rho)
    np.testing.assert_allclose(final["w"].numpy(), 1024 / 1000, atol=1e-4)
    assert "entries were clipped to 1 " in caplog.text


def test_too_few_nodes_for_s_and_t_says_how_many_are_needed() -> None:
    # Flower's default simulation has 2 SuperNodes; s = T = 1 needs 3
    s = CodedSecAgg(
        FedAvg(fraction_evaluate=0.0),
        num_stragglers=1,
        privacy_threshold=1,
        node_wait_timeout=1.0,
        progress=lambda r: None,
    )
    with pytest.raises(ConfigurationError, match=r"2 silos .* need at least 3 .*num_supernodes=3"):
        _start(s, FakeGrid(2), 1)


def test_a_clientapp_without_the_mod_is_named_with_the_fix_first() -> None:
    grid = FakeGrid(4)
    plain = ClientApp()  # the user forgot ClientApp(mods=[coded_secagg_mod])

    @plain.train()
    def train(msg: Message, context: Context) -> Message:
        arrays = msg.content["arrays"]  # a key request has none: KeyError, as a real app does
        return Message(RecordDict({"arrays": arrays}), reply_to=msg)

    grid.app = plain
    s = _strategy(4)
    with pytest.raises(ConfigurationError) as info:
        _start(s, grid, 1)
    text = str(info.value)
    assert text.startswith("key exchange: silo(s) [0, 1, 2, 3] sent no key"), text
    assert "ClientApp(mods=[coded_secagg_mod])" in text and "Traceback" not in text


def _site_keys(tmp: Path, n: int) -> Path:
    """One OpenSSH P-384 key pair per site, as simulations/deploy/certs.py makes them."""
    from simulations.deploy.certs import make_node_key

    keys = tmp / "nodes"
    keys.mkdir()
    for i in range(n):
        make_node_key(keys, f"site{i}")
    return keys


def _signed_grid(keys: Path, n: int) -> FakeGrid:
    grid = FakeGrid(n, node_config={"codedfl.trusted-keys": str(keys)})
    for i in range(n):
        grid.contexts[100 + i].node_config["codedfl.identity-key"] = str(keys / f"site{i}")
    return grid


def test_signed_keys_with_every_site_trusted_complete_every_round(tmp_path: Path) -> None:
    keys = _site_keys(tmp_path, 4)
    s = _strategy(4)
    _start(s, _signed_grid(keys, 4), 2)
    assert [r.ok for r in s.reports] == [True, True]


def test_a_site_with_an_untrusted_identity_stops_the_run_after_the_first_round(
    tmp_path: Path,
) -> None:
    # site 2's public key is not among the trusted keys (not registered): every other site
    # refuses its roster entry, so no round can complete; the run stops naming the setting
    keys = _site_keys(tmp_path, 4)
    (keys / "site2.pub").unlink()
    s = _strategy(4)
    with pytest.raises(ConfigurationError, match=r"cannot complete.*codedfl.trusted-keys") as e:
        _start(s, _signed_grid(keys, 4), 3)
    assert len(s.reports) == 1 and not s.reports[0].ok
    assert "PRIVATE" not in str(e.value) and "AAAA" not in str(e.value)


def test_a_site_without_an_identity_is_refused_by_sites_that_trust(tmp_path: Path) -> None:
    keys = _site_keys(tmp_path, 4)
    grid = _signed_grid(keys, 4)
    del grid.contexts[101].node_config["codedfl.identity-key"]  # site 1 signs nothing
    s = _strategy(4)
    with pytest.raises(ConfigurationError, match=r"unsigned.*codedfl.identity-key"):
        _start(s, grid, 3)
