"""Privacy: the server's view depends on the honest inputs only through their sum.

Two tests. (1) Exact: in a tiny field, enumerate every mask and noise value of every silo and
compare the *exact* distributions of the server's view (uploads + recovery replies), with and
without the shares a colluding silo holds, for two input sets with the same sum. (2) Statistical:
run the full protocol (real machines, AES-GCM, the codec) many times with seeded randomness in a
small field and compare the distributions of every pair of view components (chi-square).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
import torch
from scipy import stats

from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.policy import ClientPolicy
from coded_fl.secagg.sharing import MaskSharing
from simulations.runtime.secagg_harness import Harness, Silo

#: The silos of a tiny field (scale 1, exact integers) accept a scale below the default floor.
TINY_FIELD_POLICY = ClientPolicy(min_scale=0)


def tiny(n: int) -> ProtocolConfig:
    """GF(11), n silos, s = 1, T = 1, U = 2, d = 1: small enough to enumerate every mask."""
    return ProtocolConfig(
        code="polynomial",
        num_silos=n,
        num_stragglers=1,
        privacy_threshold=1,
        recovery_threshold=2,
        vector_length=1,
        p=11,
        scale=1.0,
        headroom_bits=0,
    )


class ViewLaw:
    """The exact law of a view: its distinct rows (packed, sorted) and how often each occurs.
    Two laws are equal when both arrays are."""

    def __init__(self, keys: np.ndarray, counts: np.ndarray) -> None:
        self.keys, self.counts = keys, counts

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ViewLaw):
            return NotImplemented
        return (
            self.keys.shape == other.keys.shape
            and np.array_equal(self.keys, other.keys)
            and np.array_equal(self.counts, other.counts)
        )

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.counts)


def view_law(view: np.ndarray, p: int) -> ViewLaw:
    """The exact law of the rows of ``view`` (entries in [0, p)): how often each row occurs.

    Rows are packed into int64 words first (base p, as many entries per word as fit below
    2^62), a bijection, so the keys stand for the rows exactly; sorting words instead of rows
    of a dozen columns, and keeping the law in arrays rather than a dict of a million tuples,
    makes the enumeration tests several times faster.
    """
    per = max(1, int(62 // math.log2(p)))
    words = []
    for start in range(0, view.shape[1], per):
        word = np.zeros(view.shape[0], dtype=np.int64)
        for j in range(start, min(start + per, view.shape[1])):
            word = word * p + view[:, j]
        words.append(word)
    if len(words) == 1:
        keys, counts = np.unique(words[0], return_counts=True)
        return ViewLaw(keys[:, None], counts)
    keys, counts = np.unique(np.stack(words, axis=1), axis=0, return_counts=True)
    return ViewLaw(keys, counts)


def exact_view_distribution(
    cfg: ProtocolConfig,
    q: np.ndarray,
    survivors: list[int],
    colluder: int | None,
    *,
    off: dict[int, int] | None = None,
) -> ViewLaw:
    """q: (K,) quantized partition values (d = 1). Enumerates every (mask, noise) stream of every
    silo, except the colluder's, which is fixed: the colluder knows it, and equal distributions
    for every fixed value of it mean equal distributions overall. ``off``: silo -> how far its
    replica of its first partition is from the others' (replicas that are not bit-identical);
    with more survivors than n - s the recovery also answers the parity rows."""
    p, n = cfg.p, cfg.n
    code, ms = cfg.gradient_code, cfg.sharing
    u = ms.U
    c = code.matrix.astype(np.int64) @ q % p  # c_i = sum_k B_ik q_k
    for i, delta in (off or {}).items():
        c[i] = (c[i] + int(code.matrix[i, code.support(i)[0]]) * delta) % p
    rows = np.vstack(
        [np.asarray(code.decoding_vector(survivors), dtype=np.int64)[None, :]]
        + ([code.parity_checks(survivors)] if len(survivors) > n - cfg.s else [])
    )
    free = [i for i in range(n) if i != colluder]
    grid = np.indices((p,) * (len(free) * u)).reshape(len(free) * u, -1).T
    pieces = np.zeros((grid.shape[0], n, u), dtype=np.int64)  # silo i: [z_i, noise...]
    pieces[:, free, :] = grid.reshape(-1, len(free), u)
    if colluder is not None:
        pieces[:, colluder, :] = np.arange(3, 3 + u) % p
    shares = pieces @ ms.encoding_matrix.T % p  # shares[:, i, j]: silo i's share for silo j
    y = (c[None, :] + pieces[:, :, 0]) % p  # every upload, stragglers' late ones included
    agg = np.einsum("ri,nij->nrj", rows, shares[:, survivors, :][:, :, survivors]) % p
    agg = agg.reshape(agg.shape[0], -1)  # every survivor's answer to every weight row
    parts = [y, agg]
    if colluder is not None:
        parts.append(shares[:, :, colluder])  # all shares the colluder received
    return view_law(np.concatenate(parts, axis=1), p)


def test_exact_view_is_identical_for_inputs_with_the_same_sum():
    # p = 11, n = 3, s = 1, T = 1, U = 2, K = 3, d = 1: all 11^6 mask/noise combinations.
    cfg = tiny(3)
    same_a, same_b, other = np.array([1, 10, 0]), np.array([0, 0, 0]), np.array([1, 1, 0])
    v1 = exact_view_distribution(cfg, same_a, [0, 1], None)
    assert v1 == exact_view_distribution(cfg, same_b, [0, 1], None)  # exactly the same
    assert v1 != exact_view_distribution(cfg, other, [0, 1], None)  # a different sum shows


def test_view_law_counts_rows_exactly():
    # the oracle: Counter over the rows as tuples; two words per row (20 columns at p = 11)
    rng = np.random.default_rng(5)
    for cols in (3, 20):
        view = rng.integers(0, 11, size=(5000, cols)) % 3  # repeated rows
        law = view_law(view, 11)
        want = Counter(tuple(r) for r in view.tolist())
        assert sorted(law.counts.tolist()) == sorted(want.values())
        assert len(law) == len(want)
        assert view_law(view[::-1], 11) == law  # the law, not the order
        other = view.copy()
        other[0, cols - 1] = (other[0, cols - 1] + 1) % 11
        assert view_law(other, 11) != law


@pytest.mark.slow  # exhaustive enumeration: 30-90 s on 2 cores; in CI's slow set
def test_exact_view_with_parity_rows_reveals_the_replica_differences_and_nothing_else():
    # p = 11, n = 3, s = 1, T = 1, U = 2, K = 3, all three silos upload (one extra reply), so
    # the recovery answers the decoding row and one parity row; silo 1's replica of its first
    # partition is one step off. The view (all 11^6 mask/noise combinations) depends on the
    # inputs only through the sum of the replicas decoded and the syndrome, i.e. the replicas'
    # difference: two splits of the same sum give the same view; another difference shows.
    cfg = tiny(3)
    every = [0, 1, 2]
    assert cfg.gradient_code.parity_checks(every).shape[0] == 1
    same_a, same_b = np.array([1, 10, 0]), np.array([4, 3, 4])
    v1 = exact_view_distribution(cfg, same_a, every, None, off={1: 1})
    assert v1 == exact_view_distribution(cfg, same_b, every, None, off={1: 1})
    assert v1 != exact_view_distribution(cfg, same_a, every, None, off={1: 2})
    assert v1 != exact_view_distribution(cfg, same_a, every, None)  # agreeing replicas


@pytest.mark.slow  # exhaustive enumeration: 30-90 s on 2 cores; in CI's slow set
def test_exact_view_with_a_colluding_silo_reveals_nothing_more():
    # p = 11, n = 4, s = 1, T = 1, U = 2, K = 4: silo 3 colludes with the server; the honest
    # partitions it does not hold get two splits of the same sum.
    cfg = tiny(4)
    colluder = 3
    free = [k for k in range(4) if k not in cfg.gradient_code.support(colluder)]
    assert len(free) >= 2
    q1, q2, q3 = (np.zeros(4, dtype=np.int64) for _ in range(3))
    q1[free[0]], q1[free[1]] = 1, 10
    q3[free[0]] = 1
    s = [0, 1, 2]
    v1 = exact_view_distribution(cfg, q1, s, colluder)
    assert v1 == exact_view_distribution(cfg, q2, s, colluder)
    assert v1 != exact_view_distribution(cfg, q3, s, colluder)


def test_full_protocol_view_statistics_do_not_depend_on_the_split_of_the_sum():
    p = 13
    cfg = ProtocolConfig(
        code="polynomial",
        num_silos=3,
        num_stragglers=1,
        privacy_threshold=1,
        recovery_threshold=2,
        vector_length=1,
        p=p,
        scale=1.0,
        headroom_bits=0,
        run_id="privacy",
    )
    views: dict[int, list[tuple[int, ...]]] = {0: [], 1: []}
    inputs = {0: [1.0, -1.0, 0.0], 1: [0.0, 0.0, 0.0]}  # same sum, exact integers (no rounding)
    runs = 1200
    for which, values in inputs.items():
        for seed in range(runs):
            h = Harness(
                cfg,
                seed=seed + which * 100_000,
                partials=lambda r, k, v=values: torch.tensor([v[k]]),
            )
            for c in h.clients.values():  # scale 1 in GF(13): below the default floor (2^8)
                c.policy = TINY_FIELD_POLICY
            h.setup()
            seen: list[int] = []
            orig = h.server.receive

            def spy(msg, orig=orig, seen=seen):
                orig(msg)
                if hasattr(msg, "masked"):
                    seen.append(int(msg.masked[0]))
                elif hasattr(msg, "rows"):
                    seen.append(int(msg.rows[0, 0]))

            h.server.receive = spy  # type: ignore[method-assign]
            out = h.run_round(1, {2: Silo(delay=1.0)})
            assert isinstance(out.result, RoundResult)
            views[which].append(tuple(seen))
    a, b = np.array(views[0]), np.array(views[1])
    assert a.shape == b.shape == (runs, 4)  # 2 uploads used (+1 late, refused) ... 2 replies
    pvalues = []
    for i, j in itertools.combinations(range(a.shape[1]), 2):
        ca = Counter(zip(a[:, i], a[:, j], strict=True))
        cb = Counter(zip(b[:, i], b[:, j], strict=True))
        cells = sorted(set(ca) | set(cb))
        table = np.array([[ca[c] for c in cells], [cb[c] for c in cells]])
        pvalues.append(stats.chi2_contingency(table)[1])
    assert min(pvalues) > 1e-3 / len(pvalues), pvalues  # Bonferroni over the pairs


def exact_view_derived(
    cfg: ProtocolConfig, q: np.ndarray, survivors: list[int], colluder: int | None
) -> ViewLaw:
    """As :func:`exact_view_distribution` with seed-derived shares (U - T = 1, d = 1): every
    silo's U derived shares (the PRF idealised as uniform) are enumerated; its mask and its
    sent shares are what :meth:`MaskSharing.complete` makes of them. The view adds the shares
    the colluder derives itself (every share addressed to it, derived or received)."""
    p, n = cfg.p, cfg.n
    code, ms = cfg.gradient_code, cfg.sharing
    u = ms.U
    assert u - cfg.T == 1 and cfg.vector_length == 1
    c = code.matrix.astype(np.int64) @ q % p
    free = [i for i in range(n) if i != colluder]
    grid = np.indices((p,) * (len(free) * u)).reshape(len(free) * u, -1).T
    values = np.zeros((grid.shape[0], n, u), dtype=np.int64)  # silo i: its U derived shares
    values[:, free, :] = grid.reshape(-1, len(free), u)
    if colluder is not None:
        values[:, colluder, :] = np.arange(3, 3 + u) % p
    count = grid.shape[0]
    # one MaskSharing whose pieces are as long as the grid: complete() does every row at once
    wide = MaskSharing(n=n, privacy=cfg.T, threshold=u, length=count, field=cfg.field)
    shares = np.zeros((count, n, n), dtype=np.int64)  # shares[:, i, j]: i's share for j
    masks = np.zeros((count, n), dtype=np.int64)
    members = list(range(n))
    for i in range(n):
        derived = wide.derived_set(i, members)
        others = tuple(j for j in members if j not in derived)
        vals = torch.from_numpy(values[:, i, :].T.copy().astype(np.uint32))
        mask, sent = wide.complete(derived, vals, others)
        masks[:, i] = mask.numpy().astype(np.int64)
        shares[:, i, list(derived)] = values[:, i, :]
        if others:
            shares[:, i, list(others)] = sent.numpy().astype(np.int64).T
    y = (c[None, :] + masks) % p
    rows = np.asarray(code.decoding_vector(survivors), dtype=np.int64)[None, :]
    agg = np.einsum("ri,nij->nrj", rows, shares[:, survivors, :][:, :, survivors]) % p
    parts = [y, agg.reshape(count, -1)]
    if colluder is not None:
        parts.append(shares[:, :, colluder])
    return view_law(np.concatenate(parts, axis=1), p)


@pytest.mark.slow  # exhaustive enumeration: 30-90 s on 2 cores; in CI's slow set
def test_exact_view_with_derived_shares_and_a_colluder_is_the_same_for_two_splits():
    # p = 11, n = 4, s = 1, T = 1, U = 2: each silo derives the shares of the two silos of its
    # derived set and sends (sealed, opaque to the server) the other two. The server's view and
    # silo 3's (every share addressed to it) are the same for two splits of one sum, differ for
    # another sum.
    cfg = tiny(4)
    colluder = 3
    free = [k for k in range(4) if k not in cfg.gradient_code.support(colluder)]
    q1, q2, q3 = (np.zeros(4, dtype=np.int64) for _ in range(3))
    q1[free[0]], q1[free[1]] = 1, 10
    q3[free[0]] = 1
    s = [0, 1, 2]
    v1 = exact_view_derived(cfg, q1, s, colluder)
    assert v1 == exact_view_derived(cfg, q2, s, colluder)
    assert v1 != exact_view_derived(cfg, q3, s, colluder)


def test_exact_view_with_derived_shares_and_no_colluder():
    cfg = tiny(3)
    same_a, same_b, other = np.array([1, 10, 0]), np.array([0, 0, 0]), np.array([1, 1, 0])
    v1 = exact_view_derived(cfg, same_a, [0, 1], None)
    assert v1 == exact_view_derived(cfg, same_b, [0, 1], None)
    assert v1 != exact_view_derived(cfg, other, [0, 1], None)
    # the same law as the protocol that drew the pieces and sent every share
    assert v1 == exact_view_distribution(cfg, same_a, [0, 1], None)
