"""Gradient-code benchmark: encode, decode and decoding coefficients, plus the real baseline.

Run: ``python -m simulations.bench codes --out codes.json [--quick]``.

For n in {10, 50, 100}, s in {1, n/10, n/4} and d = 1e6 (also 1e7 for n = 10), in one process
on one thread, each figure the median of >= 5 timed runs after a warm-up:

- ``decode``: :meth:`GradientCode.decode` of the polynomial code from exactly n - s replies
  into a reused output buffer (``fresh_output_seconds``: into a new tensor each call)
  (and of fractional repetition where (s+1) | n), next to two baselines timed side by side:
  a memcpy of the same bytes (the n - s replies) and a read pass that sums all n - s replies
  once (a numba loop, four vectors at a time: the memory-bound floor of any decoder);
- ``check``: :meth:`GradientCode.check_consistency` with one extra reply;
- ``encode``: one silo's coded combination of its s + 1 partial vectors (reused output buffer;
  also a fresh one), next to a memcpy and a read pass of those s + 1 vectors;
- ``coefficients``: the decoding vector of a fresh survivor set (not cached), and a cached one.

Then the real-valued baseline's relative decoding error against n (float64 and float32, the
Gaussian construction of Tandon et al. and the polynomial one over the reals), next to the field
decode's error, which is zero (checked against exact integer sums).
"""

from __future__ import annotations

import time

import numpy as np
import torch
from numba import njit

from coded_fl.codes import FractionalRepetitionCode, PolynomialCode, decoding_error
from coded_fl.field import typed_list
from simulations.bench.common import Report, median_time

P = 2**31 - 1
_BLOCK = 2048


@njit(cache=True)
def read_all(xs, out):  # pragma: no cover - numba
    """out = sum of all inputs (uint32, wrapping): every input read once, four at a time."""
    d = out.size
    k = len(xs)
    acc = np.zeros(_BLOCK, dtype=np.uint32)
    for start in range(0, d, _BLOCK):
        end = min(start + _BLOCK, d)
        a = acc[: end - start]
        a[:] = 0
        j = 0
        while j + 4 <= k:
            x0, x1, x2, x3 = (
                xs[j][start:end],
                xs[j + 1][start:end],
                xs[j + 2][start:end],
                xs[j + 3][start:end],
            )
            for i in range(a.size):
                a[i] += x0[i] + x1[i] + x2[i] + x3[i]
            j += 4
        while j < k:
            x0 = xs[j][start:end]
            for i in range(a.size):
                a[i] += x0[i]
            j += 1
        out[start:end] = a


def _baselines(vectors: list[torch.Tensor], repeats: int) -> tuple[float, float]:
    """(memcpy of the vectors' bytes, one read pass over all of them) in seconds."""
    d = vectors[0].numel()
    src = torch.empty(len(vectors) * d, dtype=torch.float32)
    dst = torch.empty_like(src)
    src.fill_(1.0)
    memcpy, _ = median_time(lambda: dst.copy_(src), repeats=repeats)
    arrays = typed_list([v.numpy() for v in vectors])
    out = np.empty(d, dtype=np.uint32)
    read, _ = median_time(lambda: read_all(arrays, out), repeats=repeats)
    return memcpy, read


def _vectors(rng: np.random.Generator, m: int, d: int) -> list[torch.Tensor]:
    buf = rng.integers(0, P, size=(m, d), dtype=np.uint32)
    return [torch.from_numpy(buf[k]) for k in range(m)]


def _coefficient_times(
    code: PolynomialCode, rng: np.random.Generator, trials: int
) -> tuple[float, float]:
    """(median seconds for a fresh survivor set, median seconds for a cached one)."""
    fresh = []
    sets = [rng.choice(code.n, code.min_replies, replace=False).tolist() for _ in range(trials)]
    for survivors in sets:
        t0 = time.perf_counter()
        code.decoding_vector(survivors)
        fresh.append(time.perf_counter() - t0)
    cached, _ = median_time(lambda: code.decoding_vector(sets[0]), repeats=trials)
    return float(np.median(fresh)), cached


def _case(
    report: Report, n: int, s: int, d: int, repeats: int, rng: np.random.Generator
) -> dict[str, float]:
    code = PolynomialCode(n, s)
    m = code.min_replies
    replies_list = _vectors(rng, m, d)
    survivors = sorted(rng.choice(n, m + 1, replace=False).tolist())
    replies = dict(zip(survivors[:m], replies_list[:m], strict=True))
    memcpy, read = _baselines(replies_list[:m], repeats)
    out = torch.empty(d, dtype=torch.uint32)
    t_dec, runs = median_time(lambda: code.decode(replies, out=out), repeats=repeats)
    t_fresh, _ = median_time(lambda: code.decode(replies), repeats=repeats)
    row = report.add(
        op="decode",
        code="polynomial",
        n=n,
        s=s,
        d=d,
        replies=m,
        seconds=t_dec,
        fresh_output_seconds=t_fresh,
        memcpy_seconds=memcpy,
        read_seconds=read,
        ratio_to_memcpy=t_dec / memcpy,
        ratio_to_read=t_dec / read,
        runs=runs,
    )
    figures = {"decode_ratio_to_read": row["ratio_to_read"]}
    if n % (s + 1) == 0:
        fr = FractionalRepetitionCode(n, s)
        t_fr, runs = median_time(lambda: fr.decode(replies, check=False, out=out), repeats=repeats)
        report.add(
            op="decode",
            code="repetition",
            n=n,
            s=s,
            d=d,
            replies=m,
            vectors_read=n // (s + 1),
            seconds=t_fr,
            ratio_to_memcpy=t_fr / memcpy,
            ratio_to_read=t_fr / read,
            runs=runs,
        )
    # one extra reply, made consistent: any n - s replies are some codeword, the extra one is
    # the value the parity check then forces
    ids = survivors[: m + 1]
    h = code.parity_checks(ids)[0]
    p = code.field.p
    forced = [(-int(h[k]) * pow(int(h[m]), -1, p)) % p for k in range(m)]
    extra = dict(replies)
    extra[ids[m]] = code.field.lincomb(forced, replies_list[:m])
    t_syn, runs = median_time(lambda: code.check_consistency(extra), repeats=max(3, repeats // 2))
    report.add(
        op="check_one_extra_reply",
        code="polynomial",
        n=n,
        s=s,
        d=d,
        replies=m + 1,
        seconds=t_syn,
        ratio_to_read=t_syn / read,
        runs=runs,
    )
    partials = replies_list[: s + 1]
    e_memcpy, e_read = _baselines(partials, repeats)
    t_enc, runs = median_time(lambda: code.encode(0, partials, out=out), repeats=repeats)
    t_enc_fresh, _ = median_time(lambda: code.encode(0, partials), repeats=repeats)
    row = report.add(
        op="encode",
        code="polynomial",
        n=n,
        s=s,
        d=d,
        partials=s + 1,
        seconds=t_enc,
        fresh_output_seconds=t_enc_fresh,
        memcpy_seconds=e_memcpy,
        read_seconds=e_read,
        ratio_to_memcpy=t_enc / e_memcpy,
        ratio_to_read=t_enc / e_read,
        runs=runs,
    )
    figures["encode_ratio_to_memcpy"] = row["ratio_to_memcpy"]
    fresh, cached = _coefficient_times(code, rng, 40)
    report.add(op="coefficients", code="polynomial", n=n, s=s, seconds=fresh, cached_seconds=cached)
    figures["coefficient_seconds"] = fresh
    return figures


def _field_error(rng: np.random.Generator, n: int, s: int, d: int) -> float:
    """Relative error of the field decode against exact integer sums (expected: 0)."""
    code = PolynomialCode(n, s)
    g = rng.integers(0, P, size=(code.K, d), dtype=np.int64)
    tensors = [torch.from_numpy(v.astype(np.uint32)) for v in g]
    survivors = sorted(rng.choice(n, n - s, replace=False).tolist())
    replies = {i: code.encode(i, [tensors[j] for j in code.support(i)]) for i in survivors}
    got = code.decode(replies).to(torch.int64).numpy()
    true = g.sum(axis=0) % P
    return float(np.linalg.norm(got - true) / np.linalg.norm(true))


def _real_baseline(report: Report, quick: bool, rng: np.random.Generator) -> None:
    for n in (10, 50, 100):
        for s in sorted({1, max(1, n // 10), n // 4}):
            cases = [("gaussian", np.float64), ("gaussian", np.float32)]
            if s == max(1, n // 10):
                cases.append(("polynomial", np.float64))
            for construction, dtype in cases:
                trials = (5 if quick else 20) if construction == "gaussian" else 3
                stats = decoding_error(
                    n, s, rng=rng, trials=trials, d=1000, construction=construction, dtype=dtype
                )
                report.add(
                    op="real_baseline_error",
                    construction=construction,
                    dtype=np.dtype(dtype).name,
                    n=n,
                    s=s,
                    trials=trials,
                    **stats,
                )
            error = _field_error(rng, n, s, 1000)
            report.add(op="field_decode_error", n=n, s=s, relative_error=error)


def run(report: Report, *, quick: bool) -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(2024)
    repeats = 5 if quick else 7
    base_d = 100_000 if quick else 1_000_000
    report.config.update(
        p=P,
        repeats=repeats,
        threads=1,
        d=base_d,
        survivors="exactly n - s (random set)",
        baseline_read="numba loop summing every reply once (uint32), four vectors at a time",
        baseline_memcpy="torch copy_ of a buffer of the same bytes",
    )
    worst_decode = 0.0
    worst_coeff = 0.0
    for n in (10, 50, 100):
        for s in sorted({1, max(1, n // 10), n // 4}):
            sizes = [base_d] + ([10 * base_d] if n == 10 else [])
            for d in sizes:
                out = _case(report, n, s, d, repeats, rng)
                if n == 100:
                    worst_decode = max(worst_decode, out["decode_ratio_to_read"])
                    worst_coeff = max(worst_coeff, out["coefficient_seconds"])
    report.goal(
        "decode n=100, d=1e6 (worst s) / one read pass over the n-s replies",
        worst_decode,
        2.0,
        applies=not quick,
    )
    report.goal(
        "decoding coefficients for a fresh survivor set, n=100 (worst s), milliseconds",
        1e3 * worst_coeff,
        5.0,
        applies=True,
    )
    _real_baseline(report, quick, rng)
    report.notes.append(
        "ratio_to_read compares with one pass that reads every reply once (the memory floor of "
        "any decoder); ratio_to_memcpy with copying the same bytes (read + write)."
    )
    report.notes.append(
        "real_baseline_error: relative L2 error of the decoded sum over random codes and "
        "survivor sets of size n - s; the field decode is exact (field_decode_error = 0)."
    )
