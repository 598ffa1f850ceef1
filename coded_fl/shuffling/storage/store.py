"""A silo's local unit store: a directory the training code reads, updated atomically.

Layout under ``root``::

    manifest.json        the truth: which units this silo holds in full, with length and SHA-256,
                         and which caches it keeps; replaced atomically (write, fsync, rename)
    units/<name>-<h>.bin one file per unit version (h: its SHA-256 prefix), written before the
                         manifest names it
    cache/<name>-<h>.bin the cached subfiles of a unit (concatenated in subfile order)

The manifest also lists the units' specs the silo *knows* (length and SHA-256 of every unit of
the organisation it was told about by a verified placement or shuffle, held or not): with them a
silo can vouch for a unit it only caches, so a later decentralized shuffle can deliver a unit
that no silo holds in full any more.

A unit becomes visible only when the manifest that names it is in place, and that happens only
after its file is complete and its hash checked; a crash or a dropped delivery in between leaves
the previous manifest, so readers see the old, consistent set of units. Files the manifest does
not name are ignored (and removed by :meth:`UnitStore.sweep`).

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as d:
...     s = UnitStore(d)
...     spec = UnitSpec("a", 3, digest(b"abc"))
...     s.commit(add={spec: b"abc"})
...     (s.units(), s.read_unit("a"))
(('a',), b'abc')
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from coded_fl.errors import DecodingError, InputError
from coded_fl.shuffling.plan.units import UnitId, UnitSpec, digest

__all__ = ["UnitStore"]

_VERSION = 1


def _name(unit_id: UnitId) -> str:
    if isinstance(unit_id, int):
        return f"i{unit_id}"
    return "s" + unit_id.encode().hex()


def _file(root: Path, kind: str, unit_id: UnitId, sha256: bytes) -> Path:
    """Content-addressed: a new version never overwrites the one the manifest names."""
    return root / kind / f"{_name(unit_id)}-{sha256.hex()[:16]}.bin"


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class UnitStore:
    """Directory-backed store of one silo's units and caches (see the module docstring).

    Every read goes to the manifest on disk, so two stores on one directory see each other's
    commits; :meth:`commit` is the one write path.

    Parameters
    ----------
    root
        The store's directory; it and its ``units/`` and ``cache/`` are created if missing. A
        directory without a manifest is an empty store at no epoch.

    Attributes
    ----------
    root : pathlib.Path
        As given.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        (self.root / "units").mkdir(parents=True, exist_ok=True)
        (self.root / "cache").mkdir(parents=True, exist_ok=True)
        self._manifest_path = self.root / "manifest.json"

    def __repr__(self) -> str:
        return f"UnitStore({str(self.root)!r})"

    # -- manifest ----------------------------------------------------------------------------
    def _read_manifest(self) -> dict[str, Any]:
        if not self._manifest_path.exists():
            return {"version": _VERSION, "epoch": None, "units": [], "cache": [], "known": []}
        return json.loads(self._manifest_path.read_text())

    @staticmethod
    def _entry(spec: UnitSpec) -> dict[str, Any]:
        return {"id": spec.unit_id, "length": spec.length, "sha256": spec.sha256.hex()}

    @staticmethod
    def _spec(entry: dict[str, Any]) -> UnitSpec:
        return UnitSpec(entry["id"], int(entry["length"]), bytes.fromhex(entry["sha256"]))

    @property
    def epoch(self) -> int | None:
        """The store's epoch: the last one a commit set (None if no commit ever set one)."""
        return self._read_manifest()["epoch"]

    def units(self) -> tuple[UnitId, ...]:
        """The units this silo holds in full (as of the last commit)."""
        return tuple(e["id"] for e in self._read_manifest()["units"])

    def spec(self, unit_id: UnitId) -> UnitSpec:
        """The length and SHA-256 the manifest records for a unit held in full (InputError if
        the store does not hold it).

        Parameters
        ----------
        unit_id
            The unit.

        Returns
        -------
        UnitSpec
        """
        for e in self._read_manifest()["units"]:
            if e["id"] == unit_id:
                return self._spec(e)
        raise InputError(f"unit {unit_id!r} is not in this store")

    def known_specs(self) -> dict[UnitId, UnitSpec]:
        """The specs of every unit this silo knows: the ones it was told about, and the ones
        it holds (a held unit's own spec wins)."""
        man = self._read_manifest()
        out = {e["id"]: self._spec(e) for e in man.get("known", [])}
        out.update({e["id"]: self._spec(e) for e in man["units"]})
        return out

    def cached(self) -> tuple[UnitId, ...]:
        """The units whose cached subfiles this silo keeps (as of the last commit)."""
        return tuple(e["id"] for e in self._read_manifest()["cache"])

    def unit_path(self, unit_id: UnitId) -> Path:
        """Where the training code may read a unit the manifest names (raw bytes).

        Parameters
        ----------
        unit_id
            The unit.

        Returns
        -------
        Path
        """
        return _file(self.root, "units", unit_id, self.spec(unit_id).sha256)

    # -- reads -------------------------------------------------------------------------------
    def _read_checked(self, kind: str, entries: list[dict[str, Any]], unit_id: UnitId) -> bytes:
        for e in entries:
            if e["id"] == unit_id:
                spec = self._spec(e)
                try:
                    data = _file(self.root, kind, unit_id, spec.sha256).read_bytes()
                except FileNotFoundError:
                    data = b""
                if not spec.verify(data):
                    raise DecodingError(
                        f"stored {kind} file of unit {unit_id!r} is missing or fails its "
                        "SHA-256: the store is damaged"
                    )
                return data
        raise InputError(f"unit {unit_id!r} has no {kind} entry in this store")

    def read_unit(self, unit_id: UnitId) -> bytes:
        """A unit's bytes, checked against its SHA-256.

        Parameters
        ----------
        unit_id
            The unit.

        Returns
        -------
        bytes
        """
        return self._read_checked("units", self._read_manifest()["units"], unit_id)

    def read_cache(self, unit_id: UnitId) -> bytes:
        """The cached subfiles of a unit, checked against their SHA-256.

        Parameters
        ----------
        unit_id
            The unit.

        Returns
        -------
        bytes
        """
        return self._read_checked("cache", self._read_manifest()["cache"], unit_id)

    # -- the one write path ------------------------------------------------------------------
    def commit(
        self,
        *,
        add: Mapping[UnitSpec, bytes] | None = None,
        drop: Iterable[UnitId] = (),
        cache: Mapping[UnitId, bytes] | None = None,
        epoch: int | None = None,
        known: Iterable[UnitSpec] = (),
    ) -> None:
        """Add verified units, drop units, set caches, record known specs, in one atomic
        manifest switch.

        Every added unit is checked against its spec first (InputError naming it if not equal),
        its file written and synced, and only then the new manifest replaces the old one.
        Files no manifest entry names any more are deleted after the switch.

        Parameters
        ----------
        add
            Verified units to add: spec -> bytes.
        drop
            Units to drop.
        cache
            Unit -> its cached subfiles.
        epoch
            The epoch the store is now at.
        known
            Specs of units the store may be sent later.
        """
        add = dict(add or {})
        for spec, data in add.items():
            if not spec.verify(data):
                raise InputError(f"unit {spec.unit_id!r} does not match its length and SHA-256")
        man = self._read_manifest()
        drop = set(drop)
        for spec, data in add.items():
            _atomic_write(_file(self.root, "units", spec.unit_id, spec.sha256), data)
        for unit_id, data in (cache or {}).items():
            _atomic_write(_file(self.root, "cache", unit_id, digest(data)), data)
        added = {spec.unit_id for spec in add}
        units = [e for e in man["units"] if e["id"] not in drop and e["id"] not in added]
        units += [self._entry(spec) for spec in add]
        caches = {e["id"]: e for e in man["cache"]}
        for unit_id, data in (cache or {}).items():
            caches[unit_id] = self._entry(UnitSpec(unit_id, len(data), digest(data)))
        knows = {e["id"]: e for e in man.get("known", [])}
        knows.update({spec.unit_id: self._entry(spec) for spec in known})
        new = {
            "version": _VERSION,
            "epoch": man["epoch"] if epoch is None else epoch,
            "units": sorted(units, key=lambda e: repr(e["id"])),
            "cache": sorted(caches.values(), key=lambda e: repr(e["id"])),
            "known": sorted(knows.values(), key=lambda e: repr(e["id"])),
        }
        _atomic_write(self._manifest_path, (json.dumps(new, indent=1) + "\n").encode())
        self._dir_sync()
        self.sweep()

    def _dir_sync(self) -> None:
        try:
            fd = os.open(self.root, os.O_RDONLY)
        except OSError:  # pragma: no cover - platforms without directory fds
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def sweep(self) -> list[Path]:
        """Remove files the manifest does not name (left by an interrupted commit)."""
        man = self._read_manifest()
        keep = {
            _file(self.root, kind, e["id"], bytes.fromhex(e["sha256"]))
            for kind in ("units", "cache")
            for e in man[kind]
        }
        gone = []
        for kind in ("units", "cache"):
            for p in (self.root / kind).iterdir():
                if p not in keep:
                    p.unlink()
                    gone.append(p)
        return gone
