"""Every refusal names the setting or the silo, and nothing partial is returned."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coded_fl.codes import (
    ApproximateCode,
    FractionalRepetitionCode,
    PolynomialCode,
    make_code,
)
from coded_fl.errors import ConfigurationError, DecodingError, InputError
from coded_fl.field import PrimeField
from tests.codes_helpers import all_replies, partition_vectors


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 10, "s": 10}, r"s=10 must be < n=10"),
        ({"n": 0, "s": 0}, r"n=0 must be >= 1"),
        ({"n": 5, "s": -1}, r"s=-1 must be >= 0"),
        ({"n": 5, "s": True}, r"s must be an int"),
        ({"n": 5.0, "s": 1}, r"n must be an int"),
        ({"n": 10, "s": 1, "kind": "mds"}, r"kind='mds' is unknown"),
        ({"n": 10, "s": 2, "kind": "repetition", "num_partitions": 2}, r"num_partitions=2 is"),
        ({"n": 10, "s": 2, "kind": "plain"}, r"kind='plain' tolerates no straggler"),
        ({"n": 10, "s": 2, "kind": "approximate"}, r"needs replication"),
        ({"n": 10, "s": 2, "replication": 2}, r"only used by kind='approximate'"),
        ({"n": 10, "s": 2, "kind": "approximate", "replication": 3}, r"replication=3 with s=2"),
        ({"n": 10, "s": 1, "num_partitions": 4}, r"num_partitions=4 with s=1 leaves silos"),
        ({"n": 10, "s": 1, "num_partitions": 0}, r"num_partitions=0 must be >= 1"),
        ({"n": 10, "s": 1, "kind": "repetition", "num_partitions": 4}, r"num_partitions=4 is"),
        ({"n": 10, "s": 1, "field": 7}, r"field must be a PrimeField"),
        ({"n": 101, "s": 3, "kind": "polynomial", "field": PrimeField(101)}, r"p=101 must be > n"),
    ],
)
def test_configuration_errors_name_the_setting(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        make_code(**kwargs)


def test_too_few_unknown_and_duplicate_survivors():
    code = PolynomialCode(10, 3)
    with pytest.raises(DecodingError, match=r"need at least n-s = 7 replies .* got 6"):
        code.decoding_vector(range(6))
    with pytest.raises(InputError, match=r"unknown silo id 10"):
        code.decoding_vector([*range(6), 10])
    with pytest.raises(InputError, match=r"unknown silo id -1"):
        code.decoding_vector([*range(6), -1])
    with pytest.raises(InputError, match=r"duplicated replies from silo\(s\) \[2\]"):
        code.decoding_vector([0, 1, 2, 2, 3, 4, 5, 6])
    with pytest.raises(InputError, match=r"silo ids are ints"):
        code.decoding_vector([0, 1, 2, 3, 4, 5, "6"])
    with pytest.raises(InputError, match=r"unknown partition 10"):
        code.holders(10)


def _replies(code):
    return all_replies(code, partition_vectors(code, d=4, seed=1))


@pytest.mark.parametrize("kind", ["polynomial", "repetition"])
def test_decode_refuses_malformed_replies(kind):
    code = make_code(6, 2, kind=kind)
    replies = _replies(code)
    with pytest.raises(DecodingError, match=r"got 3"):
        code.decode({i: replies[i] for i in range(3)})
    short = dict(replies)
    short[4] = replies[4][:3]
    with pytest.raises(InputError, match=r"vector length mismatch: reply of silo 4"):
        code.decode(short)
    wrong_dtype = dict(replies)
    wrong_dtype[1] = replies[1].to(torch.int64)
    with pytest.raises(InputError, match=r"reply of silo 1 must be a torch.uint32"):
        code.decode(wrong_dtype)
    with pytest.raises(InputError, match=r"unknown silo id 6"):
        code.decode({**replies, 6: replies[0]})
    with pytest.raises(InputError, match=r"replies must map"):
        code.decode(list(replies.values()))


@pytest.mark.parametrize("check", [True, False])
def test_decode_refuses_elements_of_a_larger_field(check):
    code = PolynomialCode(6, 2)
    replies = _replies(code)
    bad = replies[3].clone()
    bad[2] = code.field.p  # not an element of GF(p): came from another field
    with pytest.raises(InputError, match=r"reply of silo 3 holds .* not an element of GF"):
        code.decode({0: replies[0], 1: replies[1], 2: replies[2], 3: bad}, check=check)


def test_encode_refuses_wrong_partials():
    code = PolynomialCode(5, 1)
    F = code.field
    v = F.element([1, 2, 3])
    with pytest.raises(InputError, match=r"silo 2 holds 2 partition\(s\) \[2, 3\], got 1"):
        code.encode(2, [v])
    with pytest.raises(InputError, match=r"vector length mismatch"):
        code.encode(2, [v, F.element([1, 2])])
    with pytest.raises(InputError, match=r"must be a torch.uint32"):
        code.encode(2, [v, torch.tensor([1.0, 2.0, 3.0])])
    big = torch.tensor(np.array([1, F.p, 3], dtype=np.uint32))
    with pytest.raises(InputError, match=r"partial vector of partition 3 holds"):
        code.encode(2, [v, big])
    with pytest.raises(InputError, match=r"unknown silo id 5"):
        code.encode(5, [v, v])


def test_repetition_and_approximate_name_lost_partitions():
    code = FractionalRepetitionCode(6, 1)
    # one reply per group (its smallest surviving id), read through r_i^-1
    assert (code.decoding_vector([0, 2, 4, 5, 1]) != 0).tolist() == [True] * 3 + [False] * 2
    approx = ApproximateCode(6, 3, replication=2)
    with pytest.raises(DecodingError, match=r"partition\(s\) \[2, 3\].*estimate\(\)"):
        approx.decoding_vector([0, 1, 4])


def test_decoding_vector_is_cached_and_follows_the_given_order():
    code = PolynomialCode(12, 4)
    survivors = [11, 3, 5, 0, 7, 9, 2, 8]
    a = code.decoding_vector(survivors)
    b = code.decoding_vector(sorted(survivors))
    position = {silo: k for k, silo in enumerate(sorted(survivors))}
    assert a.tolist() == [int(b[position[i]]) for i in survivors]
    assert len(code._vectors) == 1  # one entry per set, whatever the order
    a[0] = 0  # callers get copies
    assert code.decoding_vector(survivors)[0] != 0 or b[position[11]] == 0
    # more than n - s replies: the n - s smallest ids carry the weights
    wide = code.decoding_vector(range(12))
    assert np.count_nonzero(wide) == 8 and wide[8:].tolist() == [0, 0, 0, 0]


def test_non_elements_are_named_by_silo_in_the_consistency_check():
    code = PolynomialCode(6, 2)
    replies = _replies(code)
    bad = dict(replies)
    bad[5] = replies[5].clone()
    bad[5][0] = code.field.p
    with pytest.raises(InputError, match=r"reply of silo 5 holds"):
        code.decode(bad)
    with pytest.raises(InputError, match=r"reply of silo 5 holds"):
        code.check_consistency(bad)
