"""Issue 29: a server that deviates learns nothing beyond the sum. One test per deviation,
each re-enacted end to end through the harness (``tests/adversarial/harness.py``) against
honest silos: the real ClientMachine, alone or inside the real ClientApp with
``coded_secagg_mod``. Each asserts that every honest silo refuses with a typed error (class
and refusal code), or that what the server computes is a function of the sum, plus exactly
the leak ``docs/protocol.md`` states.

The exact distributions behind the "function of the sum" claims are enumerated elsewhere:
``tests/unit/test_secagg_equivocation.py`` (survivor sets), ``tests/unit/test_secagg_privacy.py``
(shared masks) and ``tests/unit/test_secagg_aligned_members.py`` (group masks, member level).
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, Message

from coded_fl.crypto import pairwise_key
from coded_fl.errors import MaskReuseError, RemoteProtocolError, UntrustedKeyError
from coded_fl.secagg import ClientMachine, ProtocolConfig, RoundResult
from coded_fl.secagg.aligned import open_edge_key
from coded_fl.secagg.masking.aligned_wire import request_edges, upload_edges
from coded_fl.secagg.messages import (
    SERVER,
    RecoveryReply,
    Refusal,
    RefusalCode,
    TrainRequest,
)
from coded_fl.secagg.policy import ClientPolicy
from coded_fl.vocabulary import TRAIN_KEY
from strategies import CodedSecAgg
from tests.adversarial.harness import AdversarialGrid, MachineAdversary, ServerView, change_record
from tests.machine_helpers import sign_views
from tests.unit.test_authenticated_keys import EVE, IDS, TRUST, substituted
from tests.unit.test_strategy_faults import D
from tests.unit.test_strategy_faults import _strategy as flower_strategy

N = 4  # repetition code, s = 1: groups {0, 1} and {2, 3}
#: a partition update quantizes to zero under this automatic weight bound (a power of two)
ZEROING_BOUND = 2.0**100


def _config(masking: str, *, code: str = "auto", n: int = N, s: int = 1, **kw: object):
    return ProtocolConfig(
        code=code,
        num_silos=n,
        num_stragglers=s,
        privacy_threshold=1,
        vector_length=64,
        masking=masking,
        **kw,  # type: ignore[arg-type]
    )


def _flower_run(grid: AdversarialGrid, rounds: int, **settings: object) -> CodedSecAgg:
    strategy = flower_strategy(N, extra_wait=5.0, **settings)  # type: ignore[arg-type]
    init = ArrayRecord({"w": Array(np.zeros(D, dtype=np.float32))})
    strategy.start(grid=grid, initial_arrays=init, num_rounds=rounds)
    return strategy


def _plausible_sum(x: np.ndarray, p: int) -> np.ndarray:
    """Nonzero field elements within 2^24 of 0: what a quantized update looks like here (the
    train function moves every entry by about 1e-2); a uniform element is one with
    probability 2^-6."""
    x = np.asarray(x, dtype=np.int64) % p
    return (x != 0) & (np.minimum(x, p - x) < 2**24)


def _inv(r: int, p: int) -> int:
    return pow(int(r), -1, p)


# ----------------------------------------------------------------------------- attack 1
@pytest.mark.parametrize(
    "change",
    [(TRAIN_KEY, {"max-weight": ZEROING_BOUND}), ("config", {"lr": 0.0})],
    ids=["train-spec", "config-record"],
)
def test_train_inputs_differ_within_a_group_in_a_group_masked_round(change) -> None:  # type: ignore[no-untyped-def]
    # The server sends member 1 of group {0, 1} another max-weight (its update quantizes to
    # zero) or another config record in the group-masked round, to read the group's partition
    # sum off r0^-1 y0 - r1^-1 y1. The inputs digest binds the group mask: the two members
    # mask with independent streams and the difference is uniform.
    key, entries = change
    masked_rounds = []

    def split(silo: int, req: TrainRequest, msg: Message) -> None:
        if req.aligned and silo == 1:
            change_record(msg, key, **entries)
            masked_rounds.append(req.round)

    grid = AdversarialGrid(N, rewrite=split)
    strategy = _flower_run(grid, 3, masking="aligned", extra=1)
    p = strategy._run.config.field.p  # type: ignore[attr-defined]
    code = strategy._run.config.group_code  # type: ignore[attr-defined]
    up = grid.uploads[masked_rounds[-1]]
    assert {0, 1} <= set(up)
    y0, y1 = (up[i].masked.numpy().astype(np.int64) for i in (0, 1))
    r0, r1 = (int(code.coefficients(i)[0]) for i in (0, 1))
    diff = (_inv(r0, p) * y0 - _inv(r1, p) * y1) % p
    assert _plausible_sum(diff, p).mean() < 0.5, "the difference is the group's partition sum"
    assert not strategy.reports[-1].ok or strategy.reports[-1].offenders  # not applied as is


@pytest.mark.parametrize("masking", ["shares", "aligned"])
def test_train_inputs_differ_within_a_group_in_a_shared_mask_round(
    masking: str, server_view: ServerView
) -> None:
    # The same deviation in round 1, a round with shared masks in both runs (an aligned run
    # deals its edge keys in rounds 1 and 2). All four silos upload (one extra reply), so the
    # recovery would answer a comparison row per group, r0^-1 c0 - r1^-1 c1: group 0's
    # partition sum, since member 1's update quantizes to zero. The inputs digest keys every
    # share (derived or sealed, with its own ephemeral key) and is in the sealed shares'
    # associated data, and each silo checks every survivor's shares against its own digest
    # (never one the server relays): every silo refuses the recovery over S = {0, 1, 2, 3},
    # silos 0, 2 and 3 accusing silo 1 and silo 1 accusing silo 0, so no row of S is unmasked.
    #
    # Then the evidence (verifiable accusations): each accused silo reveals the disputed
    # share's ephemeral key, and the server judges it under the digest of the inputs its
    # driver sent the accused. The driver sent every silo the same inputs (the transport
    # changed silo 1's on the way), so silo 1's shares do not open under that digest and
    # silo 0's share for silo 1 does: the evidence shows silo 1 in every verdict, whoever the
    # true culprit (here the transport). That is the property that matters, not who is named:
    # a server that changed the inputs itself judges under its own books and can name silos
    # wrongly in its own report (it could anyway), but no survivor ever answers a recovery over
    # a set holding two digests, so what is decoded never includes silo 1's mismatched share
    # or the partition sum. Silo 1 is dropped (one verdict with evidence convicts) and the
    # server decodes the sum of S' = {0, 2, 3} (n - s silos: no comparison row).
    def split(silo: int, req: TrainRequest, msg: Message) -> None:
        if req.round == 1 and silo == 1:
            change_record(msg, TRAIN_KEY, **{"max-weight": ZEROING_BOUND})

    grid = AdversarialGrid(N, rewrite=split)
    strategy = _flower_run(grid, 1, masking=masking, extra=1)
    assert set(grid.uploads[1]) == {0, 1, 2, 3}
    for j in range(N):
        first = next(
            a for a in grid.answers[j] if isinstance(a, Refusal | RecoveryReply) and a.round == 1
        )
        assert isinstance(first, Refusal) and first.code == RefusalCode.ACCUSES, first
        assert first.accused == (0 if j == 1 else 1)
    # the security property: no decode includes silo 1, so no comparison row of S = {0..3}
    assert server_view.decoded  # the round completed over S'
    for number, survivors, weights, _ in server_view.decoded:
        assert number == 1 and 1 not in survivors, "a recovery over inconsistent inputs decoded"
        assert len(survivors) == N - 1 and weights.shape[0] == 1  # the aggregate of S' only
    # the liar is whoever the evidence shows: under the digest the driver sent, silo 1
    report = strategy.reports[-1]
    assert report.ok and report.offenders == (1,), report
    assert set(report.accused) == {0, 1}  # silo 0 (by silo 1) and silo 1 (by the others)
    assert all("silo 1 lied" in why for why in report.accused.values()), report.accused


# ----------------------------------------------------------------------------- attack 2
@pytest.mark.parametrize("code", ["repetition", "polynomial"])
def test_weight_rows_not_derived_from_the_public_code_are_refused(code: str) -> None:
    # Every survivor is asked, instead of the public rows for S, a unit row (unmask one silo),
    # the decoding vector of another survivor set, a non-check row after a(S), a multiple of a
    # check (a group code answers exactly its comparisons), or more rows than |S| - (n - s).
    # Each is refused with RemoteProtocolError blaming the server, no typed refusal (nothing
    # for the server to act on), the state unchanged; the public rows are then answered.
    if code == "repetition":
        cfg = _config("shares", extra_replies=1)
    else:
        cfg = _config("shares", code="polynomial", n=5, s=2, extra_replies=2)
    adv = MachineAdversary(cfg, seed=2)
    for req in adv.server.start_round(1):
        adv.server.receive(adv.task_and_upload(req.recipient, req)[1])
    requests = adv.server.close_collection()
    assert isinstance(requests, list)
    honest = requests[0]
    s, p = honest.survivors, cfg.p
    rows = np.asarray(honest.weights, dtype=np.int64)
    assert len(s) == cfg.n and rows.shape[0] >= 2  # a(S) and checks
    unit = np.zeros(len(s), dtype=np.int64)
    unit[0] = 1
    other = np.zeros(len(s), dtype=np.int64)  # a(S without its first silo), padded
    other[1:] = cfg.gradient_code.decoding_vector(list(s[1:]))
    forged = {
        "unit row": [unit],
        "another set's decoding vector": [other, *rows[1:]],
        "a non-check row": [rows[0], unit],
        "too many rows": [*rows, rows[1]],
    }
    if code == "repetition":  # a group code answers exactly its comparisons, no other check
        forged["a multiple of a check"] = [rows[0], 2 * rows[1] % p, *rows[2:]]
    for req in requests:
        j = req.recipient
        for what, bad in forged.items():
            weights = tuple(tuple(int(v) for v in row) for row in bad)
            err, code_ = adv.refuses(
                j, dataclasses.replace(req, weights=weights), RemoteProtocolError
            )
            assert err.sender == SERVER and code_ is None, what
        assert isinstance(adv.deliver(j, req), RecoveryReply)


# ----------------------------------------------------------------------------- attack 3
@pytest.mark.parametrize("masking", ["shares", "aligned"])
def test_the_same_round_asked_again_after_an_upload_is_refused(masking: str) -> None:
    # The round's request again (as sent, or with other contents: the roster reordered, which
    # gives another request digest and so another mask context), after the silo uploaded, and after
    # the round completed; a second upload of the round by the silo's own caller; a second
    # recovery request in the round. Refused: RemoteProtocolError (no typed refusal),
    # MaskReuseError for the second upload; nothing changes.
    adv = MachineAdversary(_config(masking), seed=4)
    number = 1
    if masking == "aligned":
        adv.honest_rounds(1, 2)  # the edge keys are dealt
        number = 3
    requests = adv.server.start_round(number)
    assert all(q.aligned == (masking == "aligned") for q in requests)
    tasks = {}
    for req in requests:
        tasks[req.recipient], up = adv.task_and_upload(req.recipient, req)
        adv.server.receive(up)
    for req in requests:
        for again in (req, dataclasses.replace(req, roster=tuple(reversed(req.roster)))):
            err, code = adv.refuses(req.recipient, again, RemoteProtocolError)
            assert "replays a round" in str(err) and code is None
        task = tasks[req.recipient]
        with pytest.raises(MaskReuseError):
            adv.clients[req.recipient].upload(task, adv.partials(task))
    recovery = adv.server.close_collection()
    assert isinstance(recovery, list)
    if masking == "shares":
        for req in recovery:
            assert isinstance(adv.deliver(req.recipient, req), RecoveryReply)
            err, code = adv.refuses(req.recipient, req, RemoteProtocolError)
            assert "second RecoveryRequest" in str(err) and code is None
    for req in requests:  # after the round completed
        assert adv.refuses(req.recipient, req, RemoteProtocolError)[1] is None


def _weight_grid() -> AdversarialGrid:
    grid = AdversarialGrid(N)
    grid.contexts[100].node_config["test-examples"] = 5000  # silo 0's partitions
    return grid


def test_the_same_round_asked_again_after_a_weight_bound_refusal_is_refused() -> None:
    # Silo 0 refuses round 1 for the automatic bound (1,024 < 5,000): a typed WEIGHT_BOUND
    # refusal carrying the power of two it needs, never the weight. The server asks the same
    # round again with every bound it might try: each is refused as a replay before any
    # training (RemoteProtocolError), so no answer splits the interval further.
    grid = _weight_grid()
    _flower_run(grid, 1)
    (refusal,) = [a for a in grid.answers[0] if isinstance(a, Refusal)]
    assert refusal.code == RefusalCode.WEIGHT_BOUND and refusal.bound == 8192
    assert "5000" not in refusal.detail
    (first, msg), *_ = grid.requests(0)
    assert first.round == refusal.round
    for bound in (2048.0, 4096.0, 8192.0, 2.0**20):
        with pytest.raises(RemoteProtocolError, match="replays a round") as err:
            grid.ask(0, msg, **{"max-weight": bound})
        assert type(err.value) is RemoteProtocolError


def test_reasks_with_other_weight_bounds_learn_at_most_the_power_of_two() -> None:
    # Re-asks in a later round (not trained yet): an automatic bound that is not a power of two
    # (4,999 or 5,000 would tell the weight apart from its power of two) is refused before
    # anything; with a fixed bound (the user's max_weight) any other bound is refused. Both
    # RemoteProtocolError, no typed refusal, no weight in any text.
    grid = _weight_grid()
    _flower_run(grid, 2)
    _, msg = grid.requests(0)[-1]
    for bound in (4999.0, 5000.0, 5001.0):
        with pytest.raises(RemoteProtocolError, match="power of two") as err:
            grid.ask(0, msg, **{"max-weight": bound})
        assert type(err.value) is RemoteProtocolError
    fixed = _weight_grid()
    _flower_run(fixed, 2, max_weight=1000.0)
    refusals = [a for a in fixed.answers[0] if isinstance(a, Refusal)]
    assert refusals and all(r.code == RefusalCode.MISCONFIGURED for r in refusals)
    assert all("5000" not in r.detail for r in refusals)
    _, msg = fixed.requests(0)[-1]
    for bound in (4999.0, 5001.0, 8192.0):
        with pytest.raises(RemoteProtocolError, match="fixed weight bound 1000") as err:
            fixed.ask(0, msg, **{"max-weight": bound})
        assert type(err.value) is RemoteProtocolError


# ----------------------------------------------------------------------------- attack 6
def _signed(masking: str, *, trust: bool) -> MachineAdversary:
    """Every silo signs its key (an identity of tests/unit/test_authenticated_keys.py); with
    ``trust`` every silo also checks every relayed key against the trust roster."""
    return MachineAdversary(
        _config(masking),
        seed=6,
        policy=lambda i: ClientPolicy(identity=IDS[i], trusted=TRUST if trust else None),
    )


@pytest.mark.parametrize("masking", ["shares", "aligned"])
def test_substituted_keys_are_refused_with_identity_keys(masking: str) -> None:
    # Every silo with a trust roster is sent its round-1 roster (a dealing round under aligned
    # masking) with one peer's key replaced by the server's: each refuses with
    # UntrustedKeyError, answered as the typed refusal UNTRUSTED_KEY, before deriving anything.
    adv = _signed(masking, trust=True)
    requests = adv.server.start_round(1)
    for req in requests:
        victim = (req.recipient + 1) % N
        bad = substituted(req, victim, EVE.public_bytes)
        pairwise = dict(adv.clients[req.recipient]._pairwise)
        err, code = adv.refuses(req.recipient, bad, UntrustedKeyError)
        assert code == RefusalCode.UNTRUSTED_KEY and f"silo {victim}" in str(err)
        assert adv.clients[req.recipient]._pairwise == pairwise
    # and in a recovery request, at a silo whose state predates the round (it takes the
    # survivors' keys from the request)
    if masking == "shares":
        stale = {
            i: ClientMachine.from_bytes(c.to_bytes(), policy=c.policy)
            for i, c in adv.clients.items()
        }
        for req in requests:
            adv.server.receive(adv.task_and_upload(req.recipient, req)[1])
        recovery = sign_views(adv.server, adv.clients, adv.server.close_collection())
        assert isinstance(recovery, list)
        for req in recovery:
            keys = tuple(
                EVE.public_bytes if i != req.recipient else k
                for i, k in zip(req.survivors, req.keys, strict=True)
            )
            adv.clients[req.recipient] = stale[req.recipient]
            _, code = adv.refuses(
                req.recipient, dataclasses.replace(req, keys=keys), UntrustedKeyError
            )
            assert code == RefusalCode.UNTRUSTED_KEY


def test_substituted_keys_without_identity_keys_are_not_defended() -> None:
    # What docs/protocol.md states: without trust rosters key substitution is not defended.
    # In an aligned run's dealing round the server puts its own key in the dealer's roster at
    # the recipient's index; the dealer seals the edge key to the server, which opens it: the
    # key of that mask-graph edge for the whole session.
    adv = _signed("aligned", trust=False)
    cfg = adv.config
    requests = {q.recipient: q for q in adv.server.start_round(1)}
    dealer, req = next((i, q) for i, q in requests.items() if request_edges(q)[1])
    q, h, recipient = request_edges(req)[1][0]
    _, up = adv.task_and_upload(dealer, substituted(req, recipient, EVE.public_bytes))
    (box,) = [b for r, q_, h_, b in upload_edges(up)[0] if (r, q_, h_) == (recipient, q, h)]
    key = pairwise_key(
        EVE, adv.server.roster[dealer], run_id=cfg.run_bytes, me=recipient, peer=dealer
    )
    stolen = open_edge_key(
        key, box, run_id=cfg.run_bytes, dealer=dealer, recipient=recipient, edge=(q, h)
    )
    assert stolen == adv.clients[dealer].edge_keys[(q, h)]


# ----------------------------------------------------------------------------- equivocation
def test_inconsistent_survivor_sets_give_the_server_only_the_sum() -> None:
    # Shared masks, polynomial code, n = 4, s = 1, U = 2, every silo uploads. The server tells
    # silos 0 and 1 S = {0, 1, 2}, silos 2 and 3 S = {1, 2, 3} (U replies each), and a stale
    # copy of silo 0 (its state regressed to right after its upload: an older copy holds no
    # digest of the round's inputs and refuses with NEEDS_KEYS; the live silo refuses a second
    # request) with silo 2's stale copy S = {0, 2, 3}. No silo notices (docs: not detected),
    # and every decode the server can make, each from the replies of one announced set, is
    # exactly the sum.
    cfg = _config("shares", code="polynomial", recovery_threshold=2, extra_replies=1)
    adv = MachineAdversary(cfg, seed=8)
    requests = adv.server.start_round(1)
    uploads = {}
    for req in requests:
        uploads[req.recipient] = adv.task_and_upload(req.recipient, req)[1]
        adv.server.receive(uploads[req.recipient])
    stale = {i: ClientMachine.from_bytes(adv.clients[i].to_bytes()) for i in (0, 2)}
    assert isinstance(adv.server.close_collection(), list)
    rnd, F = adv.server._current(), cfg.field
    exact = F.element(adv.h.expected_total(1))
    for survivors, ask in (((0, 1, 2), (0, 1)), ((1, 2, 3), (2, 3)), ((0, 2, 3), (0, 2))):
        replies = {}
        for req in adv.server._recovery_requests(rnd, survivors, ask):
            j = req.recipient
            if survivors == (0, 2, 3):  # asked again: the live silo refuses ...
                assert adv.refuses(j, req, RemoteProtocolError)[1] is None
                adv.clients[j] = stale[j]  # ... a stale copy answers
            reply = adv.deliver(j, req)
            assert isinstance(reply, RecoveryReply)
            replies[j] = reply.rows
        rows = np.asarray(req.weights, dtype=np.int64)
        masked = F.matmul(rows, [uploads[i].masked for i in survivors])
        unmasked = F.sub(masked, cfg.sharing.decode(replies))
        assert torch.equal(unmasked[0], exact), survivors


# ----------------------------------------------------------------------------- attack 4
def test_late_uploads_under_aligned_masks_show_only_the_replica_difference() -> None:
    # A group-masked round closes on silos 0, 2, 3; silo 1 (group {0, 1}) uploads late, its
    # replica off at three coordinates (another CPU). The server machine refuses the late
    # upload but the server keeps its bytes: r0^-1 y0 - r1^-1 y1 is exactly the replicas'
    # quantized difference r0^-1 c0 - r1^-1 c1 (the stated leak: a second reply of a group
    # shows the replicas' difference), zero where they agree; for group {2, 3}, whose replicas
    # agree, it is zero everywhere.
    cfg = _config("aligned")
    p = cfg.p
    code = cfg.group_code
    adv = MachineAdversary(cfg, seed=10)
    adv.honest_rounds(1, 2)
    requests = {q.recipient: q for q in adv.server.start_round(3)}
    assert all(q.aligned for q in requests.values())
    off = [3, 17, 40]

    def drift(k: int, g: torch.Tensor) -> torch.Tensor:
        g = g.clone()
        g[off] += 0.05
        return g

    view, coded = {}, {}
    for i in (0, 2, 3, 1):
        task, up = adv.task_and_upload(i, requests[i], tamper=drift if i == 1 else None)
        coded[i] = adv.coded(task, adv.partials(task, tamper=drift if i == 1 else None))
        view[i] = up.masked.numpy().astype(np.int64)
        if i == 1:
            with pytest.raises(RemoteProtocolError):
                adv.server.receive(up)  # late: refused, yet seen
            continue
        adv.server.receive(up)
        if i == 3:
            assert adv.server.close_collection() == []
            res = adv.server.finish()
            assert isinstance(res, RoundResult)
            assert torch.equal(res.aggregate, cfg.field.element(adv.h.expected_total(3)))
    r = {i: _inv(code.coefficients(i)[0], p) for i in range(N)}
    for a, b in ((0, 1), (2, 3)):
        seen = (r[a] * view[a] - r[b] * view[b]) % p
        assert np.array_equal(seen, (r[a] * coded[a] - r[b] * coded[b]) % p)
    shown = set(np.flatnonzero((r[0] * view[0] - r[1] * view[1]) % p).tolist())
    assert shown and shown <= set(off)  # the drift shows, and only where the replicas differ
    assert not np.any((r[2] * view[2] - r[3] * view[3]) % p)


# ----------------------------------------------------------------------------- attack 5
def test_adaptive_clip_reruns_show_the_server_only_the_stated_clipped_residual(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The leak docs/protocol.md states rather than removes (issue 29, item 4): a round that
    # clips is rerun with the range 4x wider, so the server holds two sums of one model and
    # round, clipped at g c and at 4 g c. Re-enacted with every decode the real server makes:
    # partition k moves every entry by rho 2 (k + 1) (rho = 1000/1024), clip range 1. The
    # server sees three attempts of round 1 (g = 1, 4, 16); the difference of two consecutive
    # ones is exactly sum_k [clip_{4gc}(u_k) - clip_{gc}(u_k)] (a statistic of the aggregate,
    # at most 3 g c per clipping partition and coordinate, zero where no partition clipped),
    # and the reruns stop at max_clip_range: at most log_4(max_clip_range / c) of them.
    from coded_fl.layout import UpdateLayout
    from tests.unit.test_strategy_faults import FakeGrid, _start

    seen: list[tuple[float, np.ndarray, int]] = []
    unpack = UpdateLayout.unpack

    def spy(layout, total, **kw):  # type: ignore[no-untyped-def]
        out = unpack(layout, total, **kw)
        summed = out.mean_delta.double().numpy()[:D] * out.total_rho
        seen.append((float(kw["delta_scale"]), summed, int(out.clipped_partitions or 0)))
        return out

    monkeypatch.setattr(UpdateLayout, "unpack", spy)
    grid = FakeGrid(N, node_config={"test-examples": 1000, "test-step": 2.0})
    s = flower_strategy(N, clip_quorum=1, max_clip_range=64.0)
    _start(s, grid, 2)
    assert [r.ok for r in s.reports] == [True, True], [r.reason for r in s.reports]
    c, rho = 1.0, 1000 / 1024
    u = np.array([rho * 2 * (k + 1) for k in range(N)])  # one partition per silo (K = n)
    assert [g for g, _, _ in seen] == [1.0, 4.0, 16.0, 16.0]  # round 1: 3 attempts; round 2
    assert len(seen) - 2 <= np.log(64.0 / c) / np.log(4)  # reruns <= log_4(max / c)
    for (g, lo, clipped), (g4, hi, _) in itertools.pairwise(seen[:3]):
        assert g4 == 4 * g
        residual = np.clip(u, -4 * g * c, 4 * g * c) - np.clip(u, -g * c, g * c)
        step = 4 * g * c / 2.0**10  # a loose bound on the quantization error of two sums
        np.testing.assert_allclose(hi - lo, residual.sum(), atol=N * step)
        assert clipped == int((np.abs(u) > g * c).sum())  # the counts the server sees anyway
        assert np.all(np.abs(hi - lo) <= 3 * g * c * clipped + N * step)
