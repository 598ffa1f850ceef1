"""Share tampering for the deployment fault tests: a forged share, as the deployment
app's ``tamper_mod`` (run config ``tamper-site``, ``tamper-target``) and
``tests/unit/test_strategy_faults.py`` send it (test apps only; nothing here runs by default)."""

from __future__ import annotations

from coded_fl.secagg.messages import Upload

__all__ = ["forge_shares"]


def forge_shares(upload: Upload, *, target: int = -1) -> Upload:
    """``upload`` with one byte flipped in the sealed share for silo ``target`` (-1: in every
    share): what a lying silo, or anything on the relay path, could do to a share."""
    shares = tuple(
        (j, bytes([box[0] ^ 0x5A]) + box[1:]) if target in (-1, j) else (j, box)
        for j, box in upload.shares
    )
    return Upload(
        digest=upload.digest,
        round=upload.round,
        sender=upload.sender,
        recipient=upload.recipient,
        masked=upload.masked,
        shares=shares,
    )
