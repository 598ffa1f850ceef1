"""The exact clip signal of the update layout (issue 27 item 3, issue 32 item 1).

Each partition carries the number of clipped model entries, a flag "an entry beyond c" and a
flag "an entry beyond c / 4" as integers that quantization keeps exactly, unweighted by rho: the
decoded sums count partitions and entries exactly, whatever the model size. The clip *rate* the
layout carried before (one float, ``rho c f``) lay below one quantization step for a single entry
of a large model and decoded as 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from coded_fl.errors import ConfigurationError
from coded_fl.field import PrimeField
from coded_fl.layout import MAX_COUNT, DecodedUpdate, UpdateLayout, count_unit
from coded_fl.quantize import (
    QuantizationConfig,
    RoundingKey,
    dequantize,
    quantize,
    stochastic_round,
)

F = PrimeField()


def _decode(
    lay: UpdateLayout,
    packed: Iterable[torch.Tensor],
    cfg: QuantizationConfig,
    *,
    run_id: str = "clip",
    server_round: int = 1,
) -> DecodedUpdate:
    """Quantize each partition's vector with its key (of run ``run_id``, round
    ``server_round``), add in GF(p), dequantize, unpack."""
    total, count = None, 0
    for k, v in enumerate(packed):  # one partition's vectors at a time (25 M: 100 MB each)
        q = quantize(v, cfg, RoundingKey.for_partition(run_id, server_round, k))
        total, count = (q if total is None else F.add(total, q)), count + 1
    assert total is not None
    return lay.unpack(dequantize(total, cfg, F), clip_range=cfg.clip_range, num_partitions=count)


def test_one_clipped_entry_in_25_million_is_counted_exactly() -> None:
    d, c = 25_000_000, 1.0
    cfg = QuantizationConfig.for_summands(2, clip_range=c, headroom_bits=8)
    lay = UpdateLayout(model_size=d, scale=cfg.scale)
    theta = torch.zeros(d)

    def partitions() -> Iterator[torch.Tensor]:
        big = np.zeros(d, dtype=np.float32)
        big[12_345_678] = 3.0  # beyond c: clipped
        yield lay.pack_arrays({"w": big}, theta, rho=1.0, clip_range=c)
        small = np.full(d, 0.01, dtype=np.float32)  # nothing beyond c / 4
        yield lay.pack_arrays({"w": small}, theta, rho=1.0, clip_range=c)

    out = _decode(lay, partitions(), cfg)
    assert out.clipped_partitions == 1
    assert out.clipped_entries == 1
    assert out.wide_partitions == 1
    assert out.clipped_fraction == 1 / (2 * d)
    # the rate the layout carried before, rho c f with f = 1 / d, at the same coordinate and
    # key: 0.08 of a quantization step, which this key rounds to 0 (the signal was lost)
    old_rate = torch.tensor([1.0 * c * float(np.float32(1 / d))])
    key = RoundingKey.for_partition("clip", 1, 0)
    assert old_rate.item() * cfg.scale < 0.1
    assert int(stochastic_round(old_rate, cfg, key, offset=d + 1)[0]) == 0


@given(
    run_id=st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=16),
    server_round=st.integers(1, 2**20),
    partitions=st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 3), st.floats(0.01, 1.0)),
        min_size=1,
        max_size=6,
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_clip_counts_decode_exactly_under_every_session_and_rounding_key(
    run_id: str, server_round: int, partitions: list[tuple[int, int, float]], seed: int
) -> None:
    """Whatever the session's rounding keys (run id, round, partition), the decoded sums count
    the clipped entries, the clipped partitions and the wide ones exactly. The oracle is numpy's
    count of the entries placed beyond c and beyond c / 4. (Before the counts were exact, a
    signal below one quantization step was lost under some keys and not others; this replaces
    repeating whole runs of the 25 M-parameter model with fresh sessions.)"""
    d, c = 2_000, 1.0
    cfg = QuantizationConfig.for_summands(len(partitions), clip_range=c, headroom_bits=8)
    lay = UpdateLayout(model_size=d, scale=cfg.scale)
    rng = np.random.default_rng(seed)
    packed, entries, clipped, wide = [], 0, 0, 0
    for n_beyond, n_wide, rho in partitions:
        x = rng.uniform(-c / 8, c / 8, d)  # inside c / 4
        at = rng.choice(d, n_beyond + n_wide, replace=False)
        signs = rng.choice([-1.0, 1.0], at.size)
        x[at[:n_beyond]] = signs[:n_beyond] * rng.uniform(1.01 * c, 40 * c, n_beyond)
        x[at[n_beyond:]] = signs[n_beyond:] * rng.uniform(0.26 * c, 0.99 * c, n_wide)
        packed.append(lay.pack(torch.from_numpy(x.astype(np.float32)), rho=rho, clip_range=c))
        entries += n_beyond
        clipped += n_beyond > 0
        wide += n_beyond + n_wide > 0
    out = _decode(lay, packed, cfg, run_id=run_id, server_round=server_round)
    assert (out.clipped_entries, out.clipped_partitions, out.wide_partitions) == (
        entries,
        clipped,
        wide,
    )


@pytest.mark.parametrize("scale", [2.0**21, 2.0**10, 255.0, 1.0, 1000.5])
def test_counts_survive_quantization_exactly_at_any_scale(scale: float) -> None:
    c, d = 4.0, 40
    cfg = QuantizationConfig(clip_range=c, scale=scale, num_summands=3)
    lay = UpdateLayout(model_size=d, scale=scale)
    gen = torch.Generator().manual_seed(int(scale) % 1000)
    deltas = [torch.rand(d, generator=gen) * 2 * c * k for k in (0.1, 1.0, 2.0)]
    packed = [lay.pack(x * 0.5, rho=0.5, clip_range=c) for x in deltas]
    cap = lay.count_cap(c)
    want = [min(cap, int((x * 0.5).abs().gt(c).sum())) for x in deltas]
    out = _decode(lay, packed, cfg)
    assert out.clipped_entries == sum(want)
    assert out.clipped_partitions == sum(w > 0 for w in want)
    wide = sum(int((x * 0.5).abs().gt(c / 4).any()) for x in deltas)
    assert out.wide_partitions == wide


def test_the_count_saturates_and_a_unit_too_coarse_for_the_range_is_refused() -> None:
    lay = UpdateLayout(model_size=4, scale=1.0)  # u = 1: counts up to c
    v = lay.pack(torch.full((4,), 9.0), rho=1.0, clip_range=2.0)
    assert v[lay.count_index].item() == 2.0 and v[lay.flag_indices[0]].item() == 1.0
    with pytest.raises(ConfigurationError, match="clip_range"):
        lay.pack(torch.zeros(4), rho=1.0, clip_range=0.5)
    assert UpdateLayout(model_size=4).count_cap(0.3) == MAX_COUNT
    assert count_unit(3.0 * 2.0**-4) == 16.0  # 3/16 = 3 x 2^-4: u s = 3


def test_an_erased_clip_count_reads_as_unknown() -> None:
    lay = UpdateLayout(model_size=3)
    v = lay.pack(torch.tensor([0.1, 2.0, 0.0]), rho=1.0, clip_range=1.0).double()
    out = lay.unpack(v, clip_range=1.0, erased=list(lay.flag_indices))
    assert out.clipped_entries == 1
    assert out.clipped_partitions is None and out.wide_partitions is None
