"""Share tampering for the deployment fault tests: a forged share, as the deployment
app's ``tamper_mod`` (run config ``tamper-site``, ``tamper-target``) and
``tests/unit/test_strategy_faults.py`` send it (test apps only; nothing here runs by default)."""

from __future__ import annotations

import dataclasses

from coded_fl.secagg.evidence import EPHEMERAL_BYTES
from coded_fl.secagg.messages import Upload

__all__ = ["forge_shares"]


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
