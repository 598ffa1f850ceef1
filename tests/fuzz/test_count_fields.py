"""Every count, length and silo id of every message, set to every extreme value, at the stage
that takes the message: refused (or accepted) in bounded time and memory, with a typed error and
no state change (the properties of :mod:`tests.fuzz.ends`). Deterministic: all of them, always.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from coded_fl.secagg.messages import encode
from tests.fuzz.ends import at_client, at_server, flower_runtime
from tests.fuzz.mutants import fields
from tests.fuzz.stages import CFG, CLIENT_TYPES, SERVER_TYPES, recording

N = CFG.n
COUNTS = (0, 1, N - 1, N, N + 1, 2**31 - 1, 2**31, 2**32 - 1)
IDS = (-(2**31), -2, -1, N, N + 1, 2**31 - 1)
#: the server stage that takes each type (a refusal is taken in every stage)
STAGE = {"KeyReply": "keys", "Upload": "collecting", "RecoveryReply": "recovering"}


@pytest.fixture(autouse=True, scope="module")
def _flower() -> Iterator[None]:
    with flower_runtime():
        yield


def _variants(msg: object) -> Iterator[tuple[bytes, str]]:
    raw = encode(msg)  # type: ignore[arg-type]
    for f in fields(raw):
        fmt, values = ("<i", IDS) if f.kind == "id" else ("<I", COUNTS)
        for v in values:
            out = bytearray(raw)
            struct.pack_into(fmt, out, f.offset, v)
            yield bytes(out), f"{f.kind}:{f.name}={v}"


@pytest.mark.parametrize("kind", SERVER_TYPES)
def test_every_count_and_id_at_the_server(kind: str) -> None:
    for base in recording().to_server[kind]:
        for raw, label in _variants(base):
            at_server(kind, STAGE.get(kind, "collecting"), base.sender, base, raw, (label,))


@pytest.mark.parametrize("kind", CLIENT_TYPES)
def test_every_count_and_id_at_the_client(kind: str) -> None:
    for base in recording().to_client[kind]:
        for raw, label in _variants(base):
            at_client(kind, "uploaded-2", base, raw, (label,))
