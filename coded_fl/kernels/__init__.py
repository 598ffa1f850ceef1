"""Numba CPU kernels (:mod:`coded_fl.kernels.cpu`) and their torch twins (``torch_impl``)."""

from __future__ import annotations

__all__ = ["warm_up"]


def warm_up() -> None:
    """Compile (or load from numba's cache) the kernels a silo uses, on tiny inputs.

    A fresh process otherwise pays this on its first real upload; the Flower mod calls it while
    answering the key exchange so that round 1 is timed like every other round.
    """
    import numpy as np
    import torch

    from coded_fl.field import PrimeField
    from coded_fl.pipeline import encode_upload
    from coded_fl.prg import expand_field_elements
    from coded_fl.quantize import QuantizationConfig, RoundingKey, quantize

    for p in (2**31 - 1,):
        field = PrimeField(p)
        cfg = QuantizationConfig.for_summands(4, clip_range=1.0, p=p)
        xs = [torch.zeros(8), torch.zeros(8), torch.zeros(8)]
        keys = [RoundingKey(1, 2), RoundingKey(1, 3), RoundingKey(1, 4)]
        mask = expand_field_elements(bytes(32), 8, p)
        encode_upload(xs, [1, 2, 3], keys, cfg, field, mask=mask)
        q = quantize(xs[0], cfg, keys[0])
        field.lincomb([1, 2], [q, q])
        m = np.array([[1, 2], [3, 4]], dtype=np.int64)
        field.matmul(m, [q, q])
        field.matmul(m, torch.stack([q, q]))
        field.validate(q)
        field.sub(q, q)
        field.to_signed(q)
    from coded_fl.layout import UpdateLayout

    theta = torch.zeros(8)
    for dtype in (np.float32, np.float64):  # the trained arrays' two native dtypes, both as
        zeros = np.zeros(8, dtype=dtype)  # arrays of the user's and as read-only views of
        for w in (zeros, np.frombuffer(zeros.tobytes(), dtype=dtype)):  # a Flower Array
            UpdateLayout(model_size=8).pack_arrays({"w": w}, theta, rho=1.0, clip_range=1.0)
