"""Share tampering for the deployment fault tests: a forged share, as the deployment
app's ``tamper_mod`` (run config ``tamper-site``, ``tamper-target``, ``tamper-mode``) and
``tests/unit/test_strategy_faults.py`` send it (test apps only; nothing here runs by default).

Two forgers, for the two parties that could alter a share:

- :func:`signed_forgeries`: the silo itself. It alters the share before it signs the entry, as
  a lying silo that holds its own identity key would: the entry's signature verifies, the
  recipient cannot open (or confirm) the share and accuses, and only the server's judgement
  (the revealed ephemeral key) names the sender (``docs/protocol.md``, "Verifiable
  accusations").
- :func:`forge_shares`: anything after the silo, on the relay path. With identity keys the
  entry's signature no longer verifies, and the server refuses the upload on arrival.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

from coded_fl.secagg.client import ClientMachine
from coded_fl.secagg.evidence import EPHEMERAL_BYTES
from coded_fl.secagg.messages import Upload

__all__ = ["forge_shares", "signed_forgeries"]


def _flip(payload: bytes) -> bytes:
    return bytes([payload[0] ^ 0x5A]) + payload[1:]


@contextmanager
def signed_forgeries(*, target: int = -1) -> Iterator[None]:
    """While open, every :class:`~coded_fl.secagg.client.ClientMachine` of this process alters
    the share it leaves for silo ``target`` (-1: for every other silo) before it signs the
    entry: one byte of the sealed box, or of the key-confirmation tag of a share it derives.
    The ephemeral key is left as it is, so the silo can still reveal it (its best move: not
    revealing names it as well). For a test app's process only (each ``flwr-clientapp``
    process runs one message)."""
    entry = ClientMachine._entry

    def forged(self, cfg, recipient, round_, kind, context, ephemeral, payload):  # type: ignore[no-untyped-def]
        if target in (-1, recipient) and recipient != self.silo:
            payload = _flip(payload)
        return entry(self, cfg, recipient, round_, kind, context, ephemeral, payload)

    ClientMachine._entry = forged  # type: ignore[method-assign]
    try:
        yield
    finally:
        ClientMachine._entry = entry  # type: ignore[method-assign]


def forge_shares(upload: Upload, *, target: int = -1) -> Upload:
    """``upload`` with one byte flipped in what it sends for silo ``target`` (-1: for every
    other silo): the sealed share, or for a share it derived the key-confirmation tag (the
    first payload byte of the entry, after its ephemeral key: the sender can still reveal the
    key, and the server's judgement finds the share bad). What a lying silo, or anything on
    the relay path, could do to a share."""
    at = EPHEMERAL_BYTES

    def flip(entry: bytes) -> bytes:
        return entry[:at] + bytes([entry[at] ^ 0x5A]) + entry[at + 1 :]

    shares = tuple((j, flip(box)) if target in (-1, j) else (j, box) for j, box in upload.shares)
    tags = tuple(
        (j, flip(tag)) if target in (-1, j) and j != upload.sender else (j, tag)
        for j, tag in upload.tags
    )
    return dataclasses.replace(upload, shares=shares, tags=tags)
