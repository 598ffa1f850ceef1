"""Masking schemes behind one interface (issue 28, item 3): the registry, the ``"auto"`` rule in
one place, and a new scheme added as its own class plus one registry line.

The test-only scheme below (no mask at all: never for real use) is all a new scheme needs:
the machines, the driver and the wire are unchanged, and a round through the in-memory harness
decodes the exact sum in one round trip, with no recovery stage. It carries a tiny Upload
extension of its own (:class:`Note`), defined here and registered only through the scheme's
registration, which travels through the real binary codec.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import torch

from coded_fl.codes import GradientCode, GroupCode
from coded_fl.errors import ConfigurationError, RemoteProtocolError
from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.masking import (
    AlignedMasks,
    MaskingScheme,
    SharedMasks,
    names,
    register,
    resolve,
)
from coded_fl.secagg.messages import Limits, Message, Upload, decode, encode
from coded_fl.secagg.messages.extensions import ExtensionCodec, MessageExtension
from coded_fl.secagg.messages.framing import Parts, Reader
from simulations.runtime.secagg_harness import Harness, Silo


@dataclass(frozen=True)
class Note(MessageExtension):
    """TEST ONLY: the test scheme's Upload extension, the round its silo uploaded for."""

    WIRE_ID: ClassVar[int] = 250
    MESSAGE: ClassVar[type[Message] | None] = Upload
    round: int = 0


def _write_note(ext: Note, parts: Parts) -> None:
    parts.append(struct.pack("<Q", ext.round))


def _read_note(r: Reader, lim: Limits | None) -> Note:
    (round_,) = r.unpack("<Q")
    return Note(round=round_)


class Unmasked(MaskingScheme):
    """TEST ONLY: uploads in the clear (the server learns every silo's coded update)."""

    name: ClassVar[str] = "test-unmasked"
    always_cancels: ClassVar[bool] = True  # nothing to recover: every round, one round trip
    upload_extension: ClassVar[ExtensionCodec | None] = ExtensionCodec(
        Note, _write_note, _read_note
    )

    def setup(self, code: GradientCode, privacy: int) -> tuple[tuple[int, int], ...]:
        if not isinstance(code, GroupCode):  # its decode reads one reply per group
            raise ConfigurationError("masking='test-unmasked' needs the repetition code")
        return ()

    def upload(
        self,
        machine: Any,
        cfg: ProtocolConfig,
        task: Any,
        partials: Sequence[torch.Tensor],
        model_digest: bytes,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        return machine.encode(cfg, task, partials, None), {"extension": Note(round=task.round)}


register(Unmasked())  # the one registry line (it registers the Note's codec too)


def _config(masking: str, code: str = "repetition", **kw: Any) -> ProtocolConfig:
    return ProtocolConfig(
        num_silos=6,
        num_stragglers=2,
        privacy_threshold=1,
        vector_length=200,
        code=code,
        masking=masking,
        **kw,
    )


def test_the_registry_holds_the_schemes_and_auto_is_resolved_in_one_place():
    assert {"shares", "aligned", "test-unmasked"} <= set(names())
    rep, poly = _config("shares").gradient_code, _config("shares", "polynomial").gradient_code
    assert isinstance(resolve("auto", rep, 1)[0], AlignedMasks)
    assert isinstance(resolve("auto", poly, 1)[0], SharedMasks)
    assert _config("auto").masking_used == "aligned"
    assert _config("auto", "polynomial").masking_used == "shares"
    with pytest.raises(ConfigurationError, match="masking must be one of 'auto', 'shares'"):
        _config("nope")
    with pytest.raises(ConfigurationError, match="needs the repetition code"):
        _config("aligned", "polynomial")
    with pytest.raises(ConfigurationError, match="new name"):
        register(Unmasked())  # a second scheme under a taken name
    with pytest.raises(ConfigurationError, match="new name"):
        register(type("Auto", (Unmasked,), {"name": "auto"})())


def test_a_new_scheme_runs_rounds_through_the_unchanged_machines(monkeypatch):
    cfg = _config("test-unmasked")
    assert cfg.scheme.name == "test-unmasked" and not cfg.aligned  # no edge keys to deal
    h = Harness(cfg, seed=4)
    h.setup()
    taken: list[Message] = []  # what the server machine was handed, decoded from the wire
    receive = h.server.receive
    monkeypatch.setattr(h.server, "receive", lambda m: (taken.append(m), receive(m))[1])
    for r in (1, 2):
        # two silos straggle: the round closes on the first n - s uploads
        out = h.run_round(r, {4: Silo(delay=5.0), 5: Silo(delay=6.0)})
        res = out.result
        assert isinstance(res, RoundResult), res
        assert torch.equal(res.aggregate, cfg.field.element(h.expected_total(r)))
        assert not res.responders  # no recovery stage: its masks "cancel"
        assert "recovery_request" not in out.sizes
        # every upload the server took carried the scheme's extension, through the codec
        ups = [m for m in taken if isinstance(m, Upload) and m.round == r]
        assert len(ups) >= cfg.min_uploads and all(u.extension == Note(round=r) for u in ups)


def test_the_schemes_extension_is_registered_with_it_and_refused_elsewhere():
    from coded_fl.secagg.messages.extensions import _BY_ID

    assert _BY_ID[Note.WIRE_ID] == Unmasked.upload_extension  # registered by register(...)
    up = Upload(digest=b"12345678", round=3, sender=1, recipient=-1, extension=Note(round=3))
    assert decode(encode(up)).extension == Note(round=3)  # type: ignore[attr-defined]
    # a run of another scheme refuses an upload carrying the Note (blamed on the silo)
    for masking in ("shares", "aligned"):
        cfg = _config(masking)
        h = Harness(cfg, seed=6)
        h.setup()
        (request, *_) = h.server.start_round(1)
        c = h.clients[request.recipient]
        task = c.on_train_request(request)
        real = c.upload(task, [h.partials(1, k) for k in task.partitions])
        forged = decode(encode(dataclasses.replace(real, extension=Note(round=1))))
        with pytest.raises(RemoteProtocolError, match="Note") as err:
            h.server.receive(forged)
        assert err.value.sender == request.recipient
        h.server.receive(real)  # the refusal changed nothing: the real upload is taken


def test_a_silo_refuses_a_request_its_scheme_cannot_have_sent():
    # shares: the masks never cancel, so a request claiming they do is the server's fault;
    # the test scheme: they always do, so a request claiming they do not is refused too
    for masking, claim in (("shares", True), ("test-unmasked", False)):
        cfg = _config(masking)
        h = Harness(cfg, seed=5)
        h.setup()
        (request, *_) = h.server.start_round(1)
        forged = dataclasses.replace(request, aligned=claim)
        with pytest.raises(RemoteProtocolError, match="cancel"):
            h.clients[forged.recipient].receive(forged)
