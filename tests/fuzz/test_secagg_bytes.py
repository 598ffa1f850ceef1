"""Mutated bytes of every protocol message at both ends (see ``tests/fuzz/__init__.py``).

Server end: a silo's reply, with the server machine at each stage (mostly the stage that takes
its type). Client end: a server message, with the machine of silo 1 at each stage of two rounds.
Each mutant is a message of the type's pool (fresh, a replay of round 1, one for another silo
or of another session) after 0 to 3 mutations (:mod:`tests.fuzz.mutants`); the properties are
:func:`tests.fuzz.ends.at_server` and :func:`tests.fuzz.ends.at_client`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz import examples
from tests.fuzz.ends import at_client, at_server, flower_runtime
from tests.fuzz.mutants import mutant
from tests.fuzz.stages import (
    CFG,
    CLIENT_STAGES,
    CLIENT_TYPES,
    SERVER_STAGES,
    SERVER_TYPES,
    recording,
)


@pytest.fixture(autouse=True, scope="module")
def _flower() -> Iterator[None]:
    with flower_runtime():
        yield


@pytest.mark.parametrize("kind", [*SERVER_TYPES, "foreign"])
@settings(max_examples=examples(60))
@given(data=st.data())
def test_server_end(kind: str, data: st.DataObject) -> None:
    takes = [s for s, t in SERVER_STAGES.items() if t.__name__ == kind]
    stage = data.draw(st.sampled_from(takes * 6 + sorted(SERVER_STAGES)), label="stage")
    base, raw, labels = data.draw(mutant(recording().to_server[kind], CFG.n), label="mutant")
    sender = getattr(base, "sender", 0)
    senders = [sender] * 3 if 0 <= sender < CFG.n else []
    silo = data.draw(st.sampled_from(senders + list(range(CFG.n))), label="silo")
    at_server(kind, stage, silo, base, raw, labels)


@pytest.mark.parametrize("kind", [*CLIENT_TYPES, "foreign"])
@settings(max_examples=examples(60))
@given(data=st.data())
def test_client_end(kind: str, data: st.DataObject) -> None:
    stage = data.draw(st.sampled_from(CLIENT_STAGES), label="stage")
    base, raw, labels = data.draw(mutant(recording().to_client[kind], CFG.n), label="mutant")
    at_client(kind, stage, base, raw, labels)
