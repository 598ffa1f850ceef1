"""Kernel benchmark: the client's field and quantization kernels against a float32 memcpy.

Run: ``python -m simulations.bench kernels --out kernels.json [--quick]``.

In one process, on one CPU thread, for each d: the median of >= 5 timed runs (after a warm-up) of
a float32 memcpy of d elements (the baseline), then quantize, a k=5 linear combination, mask
generation and the whole client pipeline (mask + fused quantize/encode of k=5 partial updates),
each as seconds and as a ratio to the memcpy. The pipeline is also timed as other
implementations would do it (unfused numpy, torch eager, torch.compile) so the choice of numba
on the CPU is a measured one. With CUDA, the same kernels run on the GPU and are reported in GB/s
next to a device-to-device copy.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

from coded_fl.field import PrimeField
from coded_fl.kernels import torch_impl
from coded_fl.pipeline import encode_upload
from coded_fl.prg import expand_field_elements
from coded_fl.quantize import QuantizationConfig, RoundingKey, quantize
from simulations.bench.common import Report, median_time

K = 5
P = 2**31 - 1


def _numpy_unfused(
    xs: list[np.ndarray], coeffs: list[int], cfg: QuantizationConfig, rng: np.random.Generator
) -> np.ndarray:
    """The pipeline written as plain vectorised numpy (what an unfused implementation costs)."""
    acc = rng.integers(0, P, size=xs[0].size, dtype=np.int64)  # mask
    for x, c in zip(xs, coeffs, strict=False):
        t = np.clip(x.astype(np.float64), -cfg.clip_range, cfg.clip_range) * cfg.scale
        f = np.floor(t)
        q = (f + (rng.random(x.size) < t - f)).astype(np.int64) % P
        acc = (acc + c * q) % P
    return acc.astype(np.uint32)


def _case(
    report: Report,
    name: str,
    d: int,
    fn: Callable[[], object],
    base: float,
    repeats: int,
    **extra: object,
) -> float:
    t, times = median_time(fn, repeats=repeats)
    report.add(kernel=name, d=d, seconds=t, ratio_to_memcpy=t / base, runs=times, **extra)
    return t


def _cpu(report: Report, d: int, repeats: int, options: bool, compile_: bool) -> float:
    gen = torch.Generator().manual_seed(d)
    F = PrimeField(P)
    cfg = QuantizationConfig.for_summands(100, clip_range=1.0)
    xs = [torch.randn(d, generator=gen) * 0.1 for _ in range(K)]
    keys = [RoundingKey.for_partition("bench", 1, j) for j in range(K)]
    coeffs = [int(c) for c in torch.randint(1, P, (K,), generator=gen)]
    field_vs = [quantize(x, cfg, keys[0]) for x in xs]
    seed = bytes(range(32))

    src = torch.randn(d, generator=gen)
    dst = torch.empty_like(src)
    base, base_runs = median_time(lambda: dst.copy_(src), repeats=max(repeats, 9))
    report.add(
        kernel="memcpy_float32",
        d=d,
        seconds=base,
        ratio_to_memcpy=1.0,
        runs=base_runs,
        bytes=4 * d,
        gb_per_s=8 * d / base / 1e9,
    )

    out = torch.empty(d, dtype=torch.uint32)
    mask_buf = torch.empty(d, dtype=torch.uint32)
    _case(report, "quantize", d, lambda: quantize(xs[0], cfg, keys[0]), base, repeats)
    _case(report, "lincomb_k5", d, lambda: F.lincomb(coeffs, field_vs), base, repeats)
    _case(
        report,
        "mask_aes_ctr",
        d,
        lambda: expand_field_elements(seed, d, P, out=mask_buf),
        base,
        repeats,
    )
    _case(
        report,
        "quantize_encode_k5",
        d,
        lambda: encode_upload(xs, coeffs, keys, cfg, F, out=out),
        base,
        repeats,
    )

    def pipeline_materialised() -> torch.Tensor:
        mask = expand_field_elements(seed, d, P, out=mask_buf)
        return encode_upload(xs, coeffs, keys, cfg, F, mask=mask, out=out)

    _case(
        report,
        "pipeline_k5",
        d,
        pipeline_materialised,
        base,
        repeats,
        implementation="numba fused, mask materialised first",
    )
    t_pipe = _case(
        report,
        "pipeline_k5",
        d,
        lambda: encode_upload(xs, coeffs, keys, cfg, F, mask_seed=seed, out=out),
        base,
        repeats,
        implementation="numba fused, mask streamed from its seed",
    )
    _case(
        report,
        "pipeline_k5_fresh_buffers",
        d,
        lambda: encode_upload(xs, coeffs, keys, cfg, F, mask_seed=seed),
        base,
        repeats,
        implementation="numba fused, mask streamed, new output tensor each call",
    )

    if options:
        rng = np.random.default_rng(0)
        xn = [x.numpy() for x in xs]
        _case(
            report,
            "pipeline_k5",
            d,
            lambda: _numpy_unfused(xn, coeffs, cfg, rng),
            base,
            max(3, repeats // 2),
            implementation="numpy unfused",
        )
        mask = expand_field_elements(seed, d, P)
        kk = [(k.k0, k.k1) for k in keys]

        def eager() -> torch.Tensor:
            return torch_impl.quantize_encode(xs, coeffs, kk, mask, cfg.clip_range, cfg.scale, P)

        _case(
            report,
            "pipeline_k5_without_mask_generation",
            d,
            eager,
            base,
            3,
            implementation="torch eager",
        )
        if compile_:
            try:
                compiled = torch.compile(torch_impl.quantize_encode, dynamic=False)
                t0 = time.perf_counter()
                compiled(xs, coeffs, kk, mask, cfg.clip_range, cfg.scale, P)
                compile_s = time.perf_counter() - t0

                def run_compiled() -> torch.Tensor:
                    return compiled(xs, coeffs, kk, mask, cfg.clip_range, cfg.scale, P)

                _case(
                    report,
                    "pipeline_k5_without_mask_generation",
                    d,
                    run_compiled,
                    base,
                    5,
                    implementation="torch.compile",
                    compile_seconds=compile_s,
                )
            except Exception as exc:  # no C++ compiler, or inductor refused the graph
                report.notes.append(f"torch.compile not measured: {type(exc).__name__}: {exc}")
    return t_pipe / base


def _gpu(report: Report, d: int) -> None:
    dev = torch.device("cuda")
    sync = torch.cuda.synchronize
    gen = torch.Generator(device=dev).manual_seed(0)
    F = PrimeField(P)
    cfg = QuantizationConfig.for_summands(100, clip_range=1.0)
    xs = [torch.randn(d, generator=gen, device=dev) * 0.1 for _ in range(K)]
    keys = [RoundingKey.for_partition("bench", 1, j) for j in range(K)]
    coeffs = [3, 5, 7, 11, 13]
    fv = [quantize(x, cfg, keys[0]) for x in xs]
    src = torch.randn(d, generator=gen, device=dev)
    dst = torch.empty_like(src)
    base, _ = median_time(lambda: dst.copy_(src), repeats=20, sync=sync)
    copy_gbs = 8 * d / base / 1e9
    report.add(kernel="gpu_memcpy_float32", d=d, seconds=base, gb_per_s=copy_gbs, device=str(dev))
    mask_cpu = expand_field_elements(bytes(32), d, P)
    mask = mask_cpu.to(dev)
    cases: list[tuple[str, Callable[[], object], int]] = [
        ("gpu_quantize", lambda: quantize(xs[0], cfg, keys[0]), 4 * d + 4 * d),
        ("gpu_lincomb_k5", lambda: F.lincomb(coeffs, fv), 4 * K * d + 4 * d),
        (
            "gpu_pipeline_k5_mask_resident",
            lambda: encode_upload(xs, coeffs, keys, cfg, F, mask=mask),
            4 * K * d + 8 * d,
        ),
        (
            "gpu_mask_generation_cpu_aes_then_h2d",
            lambda: expand_field_elements(bytes(32), d, P, device=dev),
            4 * d,
        ),
    ]
    for name, fn, nbytes in cases:
        t, _ = median_time(fn, repeats=10, sync=sync)
        gbs = nbytes / t / 1e9
        report.add(
            kernel=name, d=d, seconds=t, gb_per_s=gbs, fraction_of_copy_bandwidth=gbs / copy_gbs
        )


def run(report: Report, *, quick: bool) -> None:
    torch.set_num_threads(1)  # the goal is stated for one core
    sizes = [10**5, 10**6] if quick else [10**6, 10**7]
    repeats = 5 if quick else 7
    report.config = {"k": K, "p": P, "sizes": sizes, "repeats": repeats, "threads": 1}
    ratio = math.nan
    for d in sizes:
        ratio = _cpu(report, d, repeats, options=True, compile_=not quick and d == sizes[0])
    report.goal(
        f"client pipeline (mask + quantize/encode k=5), d={sizes[-1]:.0e}, one core, "
        "within 20x memcpy",
        ratio,
        20.0,
        applies=not quick,
    )
    if torch.cuda.is_available():
        for d in [10**6] if quick else [10**7, 10**8]:
            _gpu(report, d)
    else:
        report.notes.append("no CUDA device: GPU figures not measured in this run")
