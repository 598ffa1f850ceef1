"""The masking schemes, by name: ``ProtocolConfig(masking=...)`` looks them up here.

- ``"shares"`` (:class:`~coded_fl.secagg.masking.shares.SharedMasks`): secret-shared masks, any
  exact code, two round trips per round;
- ``"aligned"`` (:class:`~coded_fl.secagg.masking.aligned.AlignedMasks`): group-aligned masks
  over the repetition code, one round trip once the edge keys are dealt;
- ``"auto"`` (:func:`resolve`): aligned where the code is the repetition code, shares
  otherwise. This is the one place that rule is written.

A new scheme is a :class:`~coded_fl.secagg.masking.base.MaskingScheme` subclass in its own
module (with its message extensions, if it has any) and one :func:`register` line, which
registers the extensions' codecs too (``docs/architecture.md``; ``tests/unit/
test_masking_registry.py`` adds a test-only scheme that way).

>>> {'aligned', 'shares'} <= set(names())
True
"""

from __future__ import annotations

from coded_fl.codes import GradientCode, GroupCode
from coded_fl.errors import ConfigurationError
from coded_fl.secagg.masking.aligned import AlignedMasks
from coded_fl.secagg.masking.base import MaskingScheme
from coded_fl.secagg.masking.shares import SharedMasks
from coded_fl.secagg.messages import TrainRequest, Upload
from coded_fl.secagg.messages.extensions import register_extension

__all__ = ["AlignedMasks", "MaskingScheme", "SharedMasks", "names", "register", "resolve"]

_SCHEMES: dict[str, MaskingScheme] = {}


def register(scheme: MaskingScheme) -> MaskingScheme:
    """Make ``scheme`` selectable by its name.

    Parameters
    ----------
    scheme
        An instance of a :class:`MaskingScheme` subclass with a new, non-empty ``name``.

    Returns
    -------
    MaskingScheme
        ``scheme``.

    Raises
    ------
    ConfigurationError
        If the name is empty, ``"auto"`` or taken by another scheme, or an extension of the
        scheme does not travel on its message type or takes another extension's wire id.
    """
    name = scheme.name
    if not name or name == "auto" or _SCHEMES.get(name, scheme) is not scheme:
        raise ConfigurationError(f"a masking scheme needs a new name other than 'auto': {name!r}")
    for codec, message in (
        (scheme.request_extension, TrainRequest),
        (scheme.upload_extension, Upload),
    ):
        if codec is not None and codec.cls.MESSAGE is not message:
            raise ConfigurationError(
                f"masking scheme {name!r}: extension {codec.cls.__name__} must travel on "
                f"{message.__name__}"
            )
    for codec in (scheme.request_extension, scheme.upload_extension):
        if codec is not None:
            register_extension(*codec)
    _SCHEMES[name] = scheme
    return scheme


def names() -> tuple[str, ...]:
    """The registered schemes' names (``"auto"`` besides them picks one).

    Returns
    -------
    tuple[str, ...]
    """
    return tuple(_SCHEMES)


def resolve(name: str, code: GradientCode, privacy: int) -> tuple[MaskingScheme, tuple]:
    """The scheme ``name`` selects for a run with ``code``, and its mask-graph edges.

    Parameters
    ----------
    name
        A registered name, or ``"auto"``: ``"aligned"`` with the repetition code (a group
        code), ``"shares"`` otherwise.
    code
        The run's gradient code.
    privacy
        T, the colluding silos tolerated.

    Returns
    -------
    (MaskingScheme, tuple)
        The scheme and :meth:`MaskingScheme.setup`'s edges.

    Raises
    ------
    ConfigurationError
        If no scheme has the name, or the scheme cannot mask a run with ``code``.
    """
    if name == "auto":
        name = "aligned" if isinstance(code, GroupCode) else "shares"
    scheme = _SCHEMES.get(name) if isinstance(name, str) else None
    if scheme is None:
        choices = ", ".join(repr(n) for n in ("auto", *_SCHEMES))
        raise ConfigurationError(f"masking must be one of {choices}, got {name!r}")
    return scheme, scheme.setup(code, privacy)


register(SharedMasks())
register(AlignedMasks())
