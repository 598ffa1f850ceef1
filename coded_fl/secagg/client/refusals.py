"""The typed refusals a silo answers with: a protocol error turned into a :class:`Refusal`,
a setting it does not accept, a weight bound too small."""

from __future__ import annotations

from coded_fl.errors import (
    ExceedsLimitsError,
    NeedsKeysError,
    RemoteProtocolError,
    UntrustedKeyError,
)
from coded_fl.secagg.messages import SERVER, Message, Refusal, RefusalCode


def refusal_for(error: RemoteProtocolError, request: Message) -> Refusal | None:
    """The typed refusal that answers ``request`` when the machine raised ``error``, if any.

    Four refusals are signals the server acts on: :class:`NeedsKeysError` (rekey this silo), a
    share from another silo that failed authentication (the refusal accuses that silo),
    :class:`~coded_fl.errors.ExceedsLimitsError` (a configuration above the silo's limits:
    code ``MISCONFIGURED``) and :class:`~coded_fl.errors.UntrustedKeyError` (a relayed key the
    silo's trusted keys do not vouch for: code ``UNTRUSTED_KEY``). Any other error is not a
    signal: None (the adapter reports it as an error).

    Parameters
    ----------
    error
        What :meth:`ClientMachine.receive` raised.
    request
        The server message that was refused.

    Returns
    -------
    Refusal | None
    """
    if isinstance(error, NeedsKeysError):
        code, accused = RefusalCode.NEEDS_KEYS, None
    elif isinstance(error, UntrustedKeyError):
        code, accused = RefusalCode.UNTRUSTED_KEY, None
    elif isinstance(error, ExceedsLimitsError):
        code, accused = RefusalCode.MISCONFIGURED, None
    elif error.sender is not None and error.sender != SERVER:
        code, accused = RefusalCode.ACCUSES, int(error.sender)
    else:
        return None
    evidence = error.evidence if code == RefusalCode.ACCUSES else b""
    return _answer(request, code, str(error), accused=accused, evidence=evidence)


def _answer(
    request: Message,
    code: RefusalCode,
    detail: str,
    *,
    accused: int | None = None,
    bound: int = 0,
    evidence: bytes = b"",
) -> Refusal:
    """The refusal of ``request`` from the silo it was addressed to (the one builder)."""
    return Refusal(
        digest=request.digest,
        round=request.round,
        sender=request.recipient,
        recipient=SERVER,
        code=code,
        accused=accused,
        detail=detail,
        bound=bound,
        evidence=evidence,
    )


def misconfigured(request: Message, detail: str) -> Refusal:
    """The typed refusal of a silo that cannot take part because of a setting.

    Parameters
    ----------
    request
        The server message the silo cannot serve.
    detail
        What is wrong and which setting to change (no secret).

    Returns
    -------
    Refusal
        Code ``MISCONFIGURED``.
    """
    return _answer(request, RefusalCode.MISCONFIGURED, detail)


def weight_bound(request: Message, detail: str, bound: int) -> Refusal:
    """The typed refusal of a silo whose partition holds more examples than the round's
    automatic weight bound (the silo's state is left as before the round).

    Parameters
    ----------
    request
        The train request the silo cannot serve with that bound.
    detail
        What happened (no secret).
    bound
        The smallest power of two that holds the partition's weight.

    Returns
    -------
    Refusal
        Code ``WEIGHT_BOUND``.
    """
    return _answer(request, RefusalCode.WEIGHT_BOUND, detail, bound=bound)
