"""The global model keeps the dtypes it started with whatever the wrapped strategy returns."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord

from coded_fl.layout import array_layout as layout
from strategies.records import keep_layout


def test_a_float64_aggregate_of_a_float32_model_is_cast_back_and_nothing_else_changes():
    like = ArrayRecord(
        {
            "w": Array(np.zeros((2, 3), np.float32)),
            "b": Array(np.zeros(3, np.float16)),
            "steps": Array(np.zeros(2, np.int64)),
        }
    )
    w = np.arange(6, dtype=np.float64).reshape(2, 3) / 7
    got = ArrayRecord(
        {
            "w": Array(w),
            "b": Array(np.ones(4, np.float64)),  # another shape: left alone
            "steps": Array(np.ones(2, np.float64)),  # an integer array in the model: left alone
        }
    )
    out = keep_layout(got, like)
    assert out["w"].dtype == "float32" and out["b"].dtype == "float64"
    assert out["steps"].dtype == "float64"
    np.testing.assert_array_equal(out["w"].numpy(), w.astype(np.float32))
    same = keep_layout(ArrayRecord({"w": Array(w.astype(np.float32))}), like)
    assert layout(same) == (("w", (2, 3), "float32"),)
