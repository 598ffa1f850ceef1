"""A small end-to-end run of the coded-fl core (no Flower): python -m simulations.demo.

n silos quantize real updates with replica-consistent stochastic rounding, mask them with
AES-CTR masks, and the sum of the masked uploads minus the sum of the masks gives the exact
quantized sum, which is compared with the plain float sum.
"""

from __future__ import annotations

import argparse
import time

import torch

from coded_fl import (
    PrimeField,
    QuantizationConfig,
    RoundingKey,
    dequantize,
    encode_upload,
    expand_field_elements,
    fresh_seed,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--silos", type=int, default=10)
    ap.add_argument("--d", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    n, d = args.silos, args.d
    F = PrimeField()
    cfg = QuantizationConfig.for_summands(n, clip_range=1.0)
    gen = torch.Generator().manual_seed(0)
    updates = [torch.randn(d, generator=gen) * 0.05 for _ in range(n)]
    seeds = [fresh_seed() for _ in range(n)]
    t0 = time.perf_counter()
    uploads = [
        encode_upload([u], [1], [RoundingKey.for_partition("demo", 1, i)], cfg, F, mask_seed=s)
        for i, (u, s) in enumerate(zip(updates, seeds, strict=False))
    ]
    t_client = (time.perf_counter() - t0) / n
    masked_sum = F.lincomb([1] * n, uploads)
    mask_sum = F.lincomb([1] * n, [expand_field_elements(s, d, F.p) for s in seeds])
    average = dequantize(F.sub(masked_sum, mask_sum), cfg, F, divide_by=n)
    exact = torch.stack(updates).to(torch.float64).mean(0)
    err = float((average - exact).abs().max())
    print(f"coded-fl core demo: n={n} silos, d={d:,}, p=2^31-1, scale={cfg.scale:g}")
    print(f"  client quantize+mask: {t_client * 1e3:.1f} ms per silo")
    print(f"  max |secure average - float average| = {err:.3g} (quantization step {cfg.step:.3g})")
    ok = err <= cfg.step
    print("  result:", "exact up to quantization" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
