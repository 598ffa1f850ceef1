"""Error types of coded-fl.

Every error says whose fault it is, following h11's split between a local and a remote protocol
error:

- :class:`ConfigurationError`: a setting is invalid; the message names the setting and says
  what to change it to. Raised when a configuration is made, before any data moves.
  :class:`UnknownSettingError` (also a ``TypeError``): a keyword that names no setting.
- :class:`InputError`: the caller handed us data we refuse (NaN in an update, a vector of the
  wrong length, a field element out of range). The caller's bug or the caller's data.
- :class:`LocalProtocolError`: our own side was driven wrongly (a server or client state machine
  asked to do something its stage does not allow): a bug in the code that drives us.
- :class:`RemoteProtocolError`: a peer sent something we refuse (malformed, late, replayed,
  inconsistent, failed authentication). The peer misbehaved or dropped; ``sender`` names it.
- :class:`DecodingError`: an aggregate cannot be produced (too few replies, inconsistent replicas);
  no partial or wrong result is ever returned instead.
- :class:`RunAbortedError`: a run stopped because its rounds keep aborting (each round's
  reason is in its report); the model is the one of the last completed round.

No error message ever contains a secret, a key, a seed or a mask.
"""

from __future__ import annotations

__all__ = [
    "CodedFLError",
    "ConfigurationError",
    "DecodingError",
    "ExceedsLimitsError",
    "InputError",
    "KeyConfirmationError",
    "LocalProtocolError",
    "MaskReuseError",
    "NeedsKeysError",
    "RemoteProtocolError",
    "RunAbortedError",
    "UnknownSettingError",
    "UntrustedKeyError",
    "WeightBoundError",
]


class CodedFLError(Exception):
    """Base class of every error raised by coded-fl."""


class ConfigurationError(CodedFLError, ValueError):
    """A setting is invalid. The message names the setting and the value that would work."""


class UnknownSettingError(ConfigurationError, TypeError):
    """A keyword that names no setting: a :class:`ConfigurationError` and, as Python says of an
    unexpected keyword argument, a ``TypeError``. The message names the valid settings."""


class InputError(CodedFLError, ValueError):
    """Data handed to a coded-fl function is refused (shape, dtype, range, NaN/Inf)."""


class LocalProtocolError(CodedFLError):
    """Our own state machine was driven out of order: a bug in the caller, not in a peer."""


class RemoteProtocolError(CodedFLError):
    """A peer sent something we refuse. ``sender`` is the peer's id when known.

    ``evidence``: when a silo refuses a share of silo ``sender`` (an accusation) and holds an
    identity key, its signature of the accusation (:mod:`coded_fl.secagg.evidence`); empty
    otherwise. It is a signature over public data, never a secret.
    """

    def __init__(self, message: str, *, sender: int | None = None) -> None:
        super().__init__(message if sender is None else f"silo {sender}: {message}")
        self.sender = sender
        self.evidence = b""


class NeedsKeysError(RemoteProtocolError):
    """A silo holds no keys for the server's session (a restarted node, or one that missed the
    key exchange). Not a fault: the silo answers with a typed refusal
    (:class:`coded_fl.secagg.messages.Refusal`, code ``NEEDS_KEYS``) and the server reruns the
    key exchange with it before the next round."""


class KeyConfirmationError(RemoteProtocolError):
    """A mask share that a silo derived for us (instead of sending it) does not confirm: its
    key-confirmation tag differs from the one we derive, so the two ends used different keys
    (a stale roster, or a silo that rekeyed after the round started). ``sender`` names the
    silo that derived it; the share is never used, so the sum is not silently corrupted."""


class UntrustedKeyError(RemoteProtocolError):
    """A relayed key-agreement key that this silo's trust roster does not vouch for: unsigned,
    signed by an identity outside ``codedfl.trusted-keys``, or signed for another silo index
    or session (:mod:`coded_fl.secagg.identity`). Nothing is derived from it; the silo answers
    with a typed refusal (code ``UNTRUSTED_KEY``) and the server stops the run when a round
    cannot complete without it."""


class MaskReuseError(LocalProtocolError):
    """A second upload for a round this silo already uploaded: refused, because two uploads
    masked for one round would let the server subtract them."""


class ExceedsLimitsError(RemoteProtocolError):
    """A server message asks for more than this silo's limits allow (e.g. more silos or a
    longer vector than its :class:`~coded_fl.secagg.policy.ClientPolicy` maxima). Refused before
    anything proportional to the request is built; the silo answers with a typed refusal
    (code ``MISCONFIGURED``) whose detail names the node-config setting to raise."""


class WeightBoundError(ConfigurationError):
    """A partition reported more examples than the round's automatic weight bound.

    Not a fault: the silo answers with a typed refusal (code ``WEIGHT_BOUND``) carrying
    ``bound``, the smallest power of two that holds the weight, and the server reruns the round
    with the bound raised (only the bound is revealed, not the weight).
    """

    def __init__(self, message: str, bound: int) -> None:
        super().__init__(message)
        self.bound = bound


class DecodingError(CodedFLError):
    """No exact aggregate can be produced from what arrived; nothing partial is returned.

    ``suspects`` names silos whose replies are inconsistent, when that can be told.
    """

    def __init__(self, message: str, *, suspects: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.suspects = suspects


class RunAbortedError(CodedFLError):
    """A run stopped early: too many rounds in a row could not complete.

    Raised by the server adapter after ``max_aborted_rounds`` aborted rounds in a row, so that
    a run that cannot succeed ends with an error (the Flower run is recorded as failed) rather
    than after every round has aborted. The message gives the last round's reason.
    """
