"""Shared fixtures: the primes every field test runs over, galois oracles, hypothesis profiles."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile

import galois
import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60
)
settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=150
)
#: the long fuzz run (tests/fuzz): 10,000 mutants per message type and end, by hand
settings.register_profile(
    "fuzz-long",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    max_examples=10_000,
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# the mod's log of each node's uploads (coded_fl.secagg.silo.UploadLog): in a folder of this
# test process (and the simulations it starts), removed at exit, not in the machine's /tmp
if "CODED_FL_STATE_DIR" not in os.environ:
    _state_dir = tempfile.mkdtemp(prefix="coded-fl-test-state-")
    os.environ["CODED_FL_STATE_DIR"] = _state_dir
    atexit.register(shutil.rmtree, _state_dir, ignore_errors=True)

#: The default Mersenne prime (fast path), a generic prime near the limit, one just above 2^30
#: (about half of all 31-bit words rejected by the mask sampler), and small ones.
PRIMES = [2**31 - 1, 2**31 - 19, 2**30 + 3, 65537, 101]


@functools.cache
def galois_field(p: int) -> type:
    return galois.GF(p)


@pytest.fixture(params=PRIMES, ids=lambda p: f"p{p}")
def prime(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def devices() -> list[str]:
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
