"""Core entry points take numpy integers as ints and refuse what is not an int with a typed
error (found by the documentation pass over coded_fl; each failed before the fix)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from coded_fl.codes.repetition import FractionalRepetitionCode, GroupCode
from coded_fl.errors import ConfigurationError, InputError
from coded_fl.linalg import inverse, solve
from coded_fl.secagg import ProtocolConfig
from coded_fl.secagg.messages import RecoveryRequest, TrainRequest, encode


def test_fractional_repetition_with_numpy_ints_is_the_same_code() -> None:
    # np.int64(6) used to fall back to a single group: every silo held every partition
    a = FractionalRepetitionCode(np.int64(6), np.int64(2))
    b = FractionalRepetitionCode(6, 2)
    assert np.array_equal(a.matrix, b.matrix)
    # (s+1) need not divide n any more: numpy ints still give the same (unequal-group) code
    c = FractionalRepetitionCode(np.int64(5), np.int64(1))
    assert np.array_equal(c.matrix, FractionalRepetitionCode(5, 1).matrix)
    assert c.groups == ((0, 1, 2), (3, 4))


@pytest.mark.parametrize("groups", [0, 7, True])
def test_group_code_refuses_impossible_groups(groups) -> None:
    with pytest.raises(ConfigurationError):
        GroupCode(6, 1, groups=groups)


@pytest.mark.parametrize("u", [2.5, True])
def test_the_recovery_threshold_must_be_an_int(u) -> None:
    cfg = ProtocolConfig(num_silos=4, num_stragglers=1, privacy_threshold=0, vector_length=4)
    with pytest.raises(ConfigurationError, match="recovery_threshold"):
        dataclasses.replace(cfg, recovery_threshold=u)


def test_linear_algebra_refuses_scalars_and_floats() -> None:
    with pytest.raises(InputError):
        inverse(np.array(3), 7)
    with pytest.raises(InputError):
        solve(np.array(3), np.array([1]), 7)
    with pytest.raises(InputError, match="integers"):
        inverse(np.array([[0.5, 0.0], [0.0, 1.0]]), 7)


def test_encode_refuses_out_of_range_integers_with_input_error() -> None:
    with pytest.raises(InputError, match="wire type"):
        encode(TrainRequest(digest=bytes(8), round=-1, sender=-1, recipient=0))
    req = RecoveryRequest(
        digest=bytes(8),
        round=1,
        sender=-1,
        recipient=0,
        survivors=(0,),
        weights=((2**32,),),
        shares=(b"",),
        keys=(b"",),
    )
    with pytest.raises(InputError, match="wire type"):
        encode(req)
