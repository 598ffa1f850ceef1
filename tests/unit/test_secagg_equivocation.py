"""Equivocation: a server that announces different survivor sets to different silos.

Silos never compare the survivor set S they are told, so a server may tell each survivor j its
own S_j (and, where a silo's stored state regressed, ask one silo twice). Every request passes
the silo's checks (:func:`~coded_fl.secagg.verify.check_weight_rows`): row 0 is the public
decoding vector a(S_j), every other row a parity check of the code on S_j. The reply is
``sum_{i in S_j} w_i f_i(alpha_j)`` for each row w.

Claim (``docs/protocol.md``, Guarantees): let U* be the union of the announced sets. The view
of the server (every upload, every reply, and the state of a colluding silo) depends on the
coded vectors c only through ``a(U*)^T c``, the syndrome ``H c`` (H a basis of the parity
checks on U*) and the colluders' own c_i: what a server that closed the round honestly on U*
and asked every parity row would learn. With consistent replicas that is the sum
``sum_k q(g_k)`` and zeros.

Checked *exactly*, in the style of ``test_secagg_privacy.py``: in GF(11) every mask and noise
value of every honest silo is enumerated and the exact distributions of the view are compared.
The equivocating server here tells every silo a different S, asks the silo whose S has room for
it a parity row too, and asks silo 0 twice; any server that asks less sees a projection of this
view, so equal distributions here mean equal distributions for it too. A second, algebraic test
checks the same claim (a linear-algebra certificate instead of an enumeration) for larger
configurations in the default field.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from coded_fl.linalg import left_null_space, mat_mul, rank
from coded_fl.secagg import ProtocolConfig
from coded_fl.secagg.verify import check_weight_rows, weight_rows

#: (silo answering, survivor set it is told, weight rows it is asked for)
Request = tuple[int, tuple[int, ...], np.ndarray]


def tiny(n: int) -> ProtocolConfig:
    """GF(11), s = 1, T = 1, U = 2, d = 1: one data piece and one noise piece per silo."""
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


def request(cfg: ProtocolConfig, silo: int, survivors: tuple[int, ...]) -> Request:
    """The rows a server builds for S (a(S), then every parity row silos allow), checked by the
    silo's own verifier: a silo answers this request."""
    rows = weight_rows(cfg, survivors)
    check_weight_rows(cfg, survivors, rows.tolist())  # raises if a silo would refuse it
    return silo, survivors, rows


def view_codes(
    cfg: ProtocolConfig, c: np.ndarray, requests: list[Request], colluder: int | None = None
) -> np.ndarray:
    """The exact distribution of the server's view, as a sorted array of encoded views.

    ``c`` (n,) is each silo's coded value ``sum_k B_ik q(g_k)`` (d = 1); it need not be
    consistent (a silo whose replica disagrees has a wrong c_i). Every (mask, noise) pair of
    every silo but the colluder is enumerated; the colluder's is fixed (it knows it, and equal
    distributions for every fixed value of it mean equal distributions overall). The view: every
    upload y_i = c_i + z_i (late ones too), every reply, and the shares the colluder received.
    Two inputs give the same distribution iff their sorted arrays are equal.
    """
    p, n, u = cfg.p, cfg.n, cfg.U
    enc = cfg.sharing.encoding_matrix.astype(np.int64)  # share for j = enc[j] @ pieces
    free = [i for i in range(n) if i != colluder]
    grid = np.indices((p,) * (len(free) * u), dtype=np.int64).reshape(len(free) * u, -1).T
    pieces = np.zeros((grid.shape[0], n, u), dtype=np.int64)  # silo i: [z_i, noise_i]
    pieces[:, free, :] = grid.reshape(-1, len(free), u)
    del grid
    if colluder is not None:
        pieces[:, colluder, :] = np.arange(3, 3 + u) % p
    columns = [(c[None, :] + pieces[:, :, 0]) % p]  # y_i for every silo
    for j, survivors, rows in requests:
        shares_j = pieces[:, list(survivors), :] @ enc[j] % p  # f_i(alpha_j), i in S
        columns.append(shares_j @ rows.T % p)  # one value per weight row
    if colluder is not None:
        columns.append(pieces @ enc[colluder] % p)  # f_i(alpha_colluder) for every i
    view = np.concatenate(columns, axis=1)
    assert view.shape[1] * np.log2(p) < 63  # the base-p code of a view fits in an int64
    code = np.zeros(view.shape[0], dtype=np.int64)
    for col in view.T:
        code = code * p + col
    return np.sort(code)


def same(x: np.ndarray, y: np.ndarray) -> bool:
    return bool(np.array_equal(x, y))


@pytest.mark.slow  # exhaustive enumeration: 30-90 s on 2 cores; in CI's slow set
def test_equivocation_reveals_only_the_sum_with_consistent_replicas():
    # n = 3: silo 0 is told {0,1}, silo 1 {1,2}, silo 2 {0,1,2} (and asked the parity row), and
    # silo 0 a second time {0,2} (a silo whose stored state regressed answers again).
    cfg = tiny(3)
    b = cfg.gradient_code.matrix.astype(np.int64)
    reqs = [
        request(cfg, 0, (0, 1)),
        request(cfg, 1, (1, 2)),
        request(cfg, 2, (0, 1, 2)),
        request(cfg, 0, (0, 2)),
    ]
    assert reqs[2][2].shape == (2, 3)  # a(S) and one parity row

    def coded(q):
        return b @ np.asarray(q, dtype=np.int64) % cfg.p

    v1 = view_codes(cfg, coded([1, 10, 0]), reqs)  # sum 0
    assert same(v1, view_codes(cfg, coded([0, 0, 0]), reqs))  # sum 0: exactly the same view
    assert same(v1, view_codes(cfg, coded([4, 2, 5]), reqs))  # sum 0 (11): the same again
    assert not same(v1, view_codes(cfg, coded([1, 1, 0]), reqs))  # the sum itself shows


def test_equivocation_with_a_colluding_silo_reveals_only_the_sum():
    # n = 4, silo 3 colludes with the server (its shares of every f_i are in the view); the
    # honest partitions it does not hold get two splits of the same sum. Each survivor is told
    # a different S; silo 0 is asked twice, once with the parity row of the full set.
    cfg = tiny(4)
    colluder = 3
    b = cfg.gradient_code.matrix.astype(np.int64)
    reqs = [
        request(cfg, 0, (0, 1, 2)),
        request(cfg, 1, (0, 1, 3)),
        request(cfg, 2, (1, 2, 3)),
        request(cfg, 0, (0, 1, 2, 3)),
        request(cfg, colluder, (0, 2, 3)),
    ]
    hidden = [k for k in range(4) if k not in cfg.gradient_code.support(colluder)]
    assert len(hidden) == 2
    q1, q2, q3 = (np.zeros(4, dtype=np.int64) for _ in range(3))
    q1[hidden[0]], q1[hidden[1]] = 1, 10  # the same sum as q2 (0), split differently
    q3[hidden[0]] = 1
    v1 = view_codes(cfg, b @ q1 % cfg.p, reqs, colluder)
    assert same(v1, view_codes(cfg, b @ q2 % cfg.p, reqs, colluder))
    assert not same(v1, view_codes(cfg, b @ q3 % cfg.p, reqs, colluder))


def test_with_disagreeing_replicas_equivocation_reveals_the_syndrome_and_no_more():
    # What leaks when replicas disagree: the decoded values under two announced sets differ by
    # (a(S1) - a(S2))^T c, a parity check on S1 u S2 applied to the replicas' errors. That is
    # more than an honest server closing on S = {0, 1} without extra replies sees, and exactly
    # what an honest close on U* = {0, 1, 2} with its parity row reveals: a(U*)^T c and H c.
    cfg = tiny(3)
    p = cfg.p
    code = cfg.gradient_code
    b = code.matrix.astype(np.int64)
    # two survivors per announced set (U = 2) so that both decodes succeed: silo 0 answers
    # twice (its stored state regressed), once for {0, 1} and once for {0, 2}
    reqs = [
        request(cfg, 0, (0, 1)),
        request(cfg, 1, (0, 1)),
        request(cfg, 0, (0, 2)),
        request(cfg, 2, (0, 2)),
    ]
    honest_01 = [request(cfg, j, (0, 1)) for j in (0, 1)]
    honest_all = [request(cfg, j, (0, 1, 2)) for j in (0, 1, 2)]

    consistent = b @ np.array([2, 7, 1]) % p
    wrong = consistent.copy()
    wrong[2] = (wrong[2] + 1) % p  # silo 2's replica disagrees: its coded value is off by one
    a_01 = np.zeros(3, dtype=np.int64)
    a_01[[0, 1]] = code.decoding_vector([0, 1])
    h = code.parity_checks([0, 1, 2])[0]
    assert a_01 @ wrong % p == a_01 @ consistent % p  # the honest {0,1} decode is unchanged
    assert h @ wrong % p != 0  # the syndrome is not

    # the honest server on {0,1} without extra replies cannot tell the two apart ...
    assert same(view_codes(cfg, consistent, honest_01), view_codes(cfg, wrong, honest_01))
    # ... the equivocating one can, and so can an honest close on {0,1,2} with the parity row
    assert not same(view_codes(cfg, consistent, reqs), view_codes(cfg, wrong, reqs))
    assert not same(view_codes(cfg, consistent, honest_all), view_codes(cfg, wrong, honest_all))
    # and nothing more: moving c along the one direction that keeps a(U*)^T c and H c (a
    # zero-sum change of the partitions) leaves the view's distribution exactly as it was
    zero_sum = b @ np.array([1, p - 1, 0]) % p
    assert same(view_codes(cfg, wrong, reqs), view_codes(cfg, (wrong + 3 * zero_sum) % p, reqs))


def _revealed_by_view(
    cfg: ProtocolConfig, requests: list[Request], colluders: list[int], d_pieces: int
) -> np.ndarray:
    """The linear functionals of the coded vectors that the view reveals, as rows.

    With d = d_pieces * (U - T) (no padding), the view is V = M r + N c over GF(p), r the
    uniform pieces of the honest silos (the colluders' are known, so they are constants) and c
    the coded vectors (n x d, flattened). V's distribution is uniform on N c + col(M), so it
    depends on c only through phi N c for every phi with phi M = 0: those phi N are returned.
    """
    p, n, u, t = cfg.p, cfg.n, cfg.U, cfg.T
    data = u - t
    enc = cfg.sharing.encoding_matrix.astype(np.int64)
    honest = [i for i in range(n) if i not in colluders]
    # unknowns r: pieces[i, piece, slot] for honest i; inputs c: c[i, piece, slot], piece < data
    r_index = {
        (i, k, x): z
        for z, (i, k, x) in enumerate(itertools.product(honest, range(u), range(d_pieces)))
    }
    c_index = {
        (i, k, x): z
        for z, (i, k, x) in enumerate(itertools.product(range(n), range(data), range(d_pieces)))
    }
    m_rows, n_rows = [], []

    def row() -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(len(r_index), dtype=np.int64), np.zeros(len(c_index), dtype=np.int64)

    for i in honest:  # uploads of the honest silos: y = c + data pieces
        for k, x in itertools.product(range(data), range(d_pieces)):
            mr, nr = row()
            mr[r_index[(i, k, x)]] = 1
            nr[c_index[(i, k, x)]] = 1
            m_rows.append(mr)
            n_rows.append(nr)
    for i in colluders:  # a colluder's upload: its mask is known, so it shows c_i itself
        for k, x in itertools.product(range(data), range(d_pieces)):
            mr, nr = row()
            nr[c_index[(i, k, x)]] = 1
            m_rows.append(mr)
            n_rows.append(nr)
    for j, survivors, rows in requests:  # replies: sum_i w_i enc[j] . pieces_i
        for w, x in itertools.product(rows, range(d_pieces)):
            mr, nr = row()
            for wi, i in zip(w, survivors, strict=True):
                if i in honest:
                    for k in range(u):
                        mr[r_index[(i, k, x)]] += int(wi) * int(enc[j, k])
            m_rows.append(mr % p)
            n_rows.append(nr)
    for col in colluders:  # the colluders' shares of every honest silo
        for i, x in itertools.product(honest, range(d_pieces)):
            mr, nr = row()
            for k in range(u):
                mr[r_index[(i, k, x)]] = int(enc[col, k])
            m_rows.append(mr)
            n_rows.append(nr)
    m, nm = np.array(m_rows), np.array(n_rows)
    phi = left_null_space(m, p)  # phi M = 0
    return mat_mul(phi, nm, p) if phi.size else np.zeros((0, nm.shape[1]), dtype=np.int64)


@pytest.mark.parametrize(
    ("n", "s", "t", "u", "colluders"),
    [(3, 1, 1, 2, []), (5, 2, 1, 3, [4]), (6, 2, 2, 4, [1, 2]), (6, 1, 1, 3, [0])],
)
def test_equivocation_certificate_in_the_default_field(n, s, t, u, colluders):
    # Random equivocation (every answering silo told its own random S, some asked twice) in
    # GF(2^31 - 1), 2 slots per piece: every functional of c the view reveals is a combination
    # of a(U*)^T c and H c, per slot and data piece, and with consistent replicas those are the
    # sum and zeros.
    cfg = ProtocolConfig(
        code="polynomial",
        num_silos=n,
        num_stragglers=s,
        privacy_threshold=t,
        recovery_threshold=u,
        vector_length=2 * (u - t),
    )
    p, data, slots = cfg.p, u - t, 2
    rng = random.Random(f"{n}-{s}-{t}-{u}")
    sizes = range(max(n - s, u), n + 1)
    reqs = []
    for j in list(range(n)) + rng.sample(range(n), 2):
        survivors = tuple(sorted(rng.sample(range(n), rng.choice(sizes))))
        reqs.append(request(cfg, j, survivors))
    union = sorted(set().union(*(set(r[1]) for r in reqs)))
    revealed = _revealed_by_view(cfg, reqs, colluders, slots)

    # what an honest close on U* reveals, per (piece, slot): a(U*)^T c and H c
    code = cfg.gradient_code
    a = np.zeros(n, dtype=np.int64)
    a[union] = code.decoding_vector(union)
    checks = np.zeros((0, n), dtype=np.int64)
    if len(union) > n - s:
        h = code.parity_checks(union)
        checks = np.zeros((h.shape[0], n), dtype=np.int64)
        checks[:, union] = h
    basis = []
    for w in [a, *checks]:
        for k, x in itertools.product(range(data), range(slots)):
            f = np.zeros((n, data, slots), dtype=np.int64)
            f[:, k, x] = w
            basis.append(f.reshape(-1))
    for i in colluders:  # the colluders know their own coded vectors
        for k, x in itertools.product(range(data), range(slots)):
            f = np.zeros((n, data, slots), dtype=np.int64)
            f[i, k, x] = 1
            basis.append(f.reshape(-1))
    basis_m = np.array(basis)
    r_basis = rank(basis_m, p)
    assert rank(np.concatenate([basis_m, revealed]), p) == r_basis  # nothing outside the span
    # the helper is not vacuous: an honest close on U* (every silo of U* answers a(U*) and every
    # parity row) reveals exactly that span
    honest = _revealed_by_view(
        cfg, [request(cfg, j, tuple(union)) for j in union], colluders, slots
    )
    assert rank(honest, p) == r_basis
    assert rank(np.concatenate([basis_m, honest]), p) == r_basis
    # and with consistent replicas (c = B q per piece and slot) those functionals are the sum
    # over partitions and, for the colluders, their own coded vectors: a zero-sum change of the
    # partitions the colluders do not hold is invisible
    hidden = [k for k in range(code.K) if all(code.matrix[i, k] == 0 for i in colluders)]
    assert len(hidden) >= 2
    delta_q = np.zeros(code.K, dtype=np.int64)
    delta_q[hidden[0]], delta_q[hidden[1]] = 1, p - 1
    delta_c = code.matrix.astype(np.int64) @ delta_q % p  # (n,)
    for k, x in itertools.product(range(data), range(slots)):
        move = np.zeros((n, data, slots), dtype=np.int64)
        move[:, k, x] = delta_c
        assert not np.any(mat_mul(revealed, move.reshape(-1, 1), p))
