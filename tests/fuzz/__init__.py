"""Fuzz harness: every protocol message at both ends, as bytes, as Flower records, in rounds.

What it checks, for every mutant (bit flips, truncations, extensions, splices, counts and
lengths set to 0, n - 1, n + 1, 2^31, 2^32 - 1, ids out of range, another type, digest or round
in the header, replays and out-of-stage deliveries, forged weight rows, wrong dtypes, shapes and
stypes of the Flower ``Array``, other record types):

- nothing crashes and nothing untyped escapes: the core raises only
  :class:`coded_fl.errors.CodedFLError` subclasses; the server's reply handling
  (``strategies.replies.feed``) never raises: a silo whose reply is refused is a failed silo of
  the stage;
- a refusal changes nothing (``ClientMachine.to_bytes()`` on a silo, a snapshot of the server
  machine and the run's rekey set on the server) and an acceptance changes only the sender's
  entry;
- each message is handled in bounded time and memory (decoding under 50 ms, decoding and
  handling under 250 ms of CPU and 4 MiB of traced allocations);
- a round is exact or aborted with the model unchanged (``test_secagg_rounds``).

Modules: ``mutants`` (the mutation strategies and the field map of the encoding), ``stages``
(a recorded run: both machines at every stage, pools of fresh, replayed and foreign messages,
snapshots), ``test_secagg_bytes``, ``test_secagg_records``, ``test_secagg_rounds``,
``test_shuffle_bytes``, ``test_count_fields`` (every count field set to every huge value).

Profiles. The default test run uses a few dozen mutants per message type and end (well under a
minute for the whole directory). The long run is by hand::

    source scripts/env.sh
    HYPOTHESIS_PROFILE=fuzz-long CODEDFL_FUZZ_REPORT=fuzz-report.json \\
        python -m pytest -p no:cacheprovider tests/fuzz

It runs 10,000 mutants per message type and end (1,000 fuzzed runs of three rounds each at
the round level, 500 fuzzed shuffle epochs) and writes, per type and end, how many mutants were
refused where and which classes of mutants were accepted (see the terminal summary).
``CODEDFL_FUZZ_EXAMPLES=N`` sets the number of mutants per test directly.
"""

from __future__ import annotations

import os

__all__ = ["LONG", "examples"]

#: True under ``HYPOTHESIS_PROFILE=fuzz-long``.
LONG = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz-long"


def examples(quick: int, long: int = 10_000) -> int:
    """Mutants per test: ``quick`` in the default run, ``long`` in the long profile, or
    ``CODEDFL_FUZZ_EXAMPLES`` if set."""
    env = os.environ.get("CODEDFL_FUZZ_EXAMPLES")
    if env:
        return int(env)
    return long if LONG else quick
