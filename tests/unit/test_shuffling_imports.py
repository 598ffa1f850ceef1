"""Layering: the library (coded_fl, the Flower adapters) never imports the in-memory harnesses
or anything else of ``simulations/`` (the wheel does not ship it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_library_imports_nothing_of_simulations():
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for pkg in ("coded_fl", "strategies", "clients", "coded_fl_flower")
        for p in (ROOT / pkg).rglob("*.py")
    )
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('simulations', 'tests')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=ROOT,
    )
    assert len(modules) > 50
    assert out.stdout.strip() == "[]"
