"""Layering: production code (the shuffling package, the Flower adapters) never imports the
in-memory test harness."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_production_code_does_not_import_the_harness():
    code = (
        "import sys, coded_fl.shuffling, clients.shuffle, strategies.shuffle;"
        "print('coded_fl.shuffling.harness' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "False"
