"""coded_fl is framework-free: it imports and works with Flower made unimportable."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import coded_fl

SCRIPT = r"""
import importlib, importlib.abc, pkgutil, sys

class NoFlower(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "flwr" or name.startswith("flwr."):
            raise ImportError(f"flwr is blocked in this test ({name})")
        return None

sys.meta_path.insert(0, NoFlower())
import coded_fl
for mod in pkgutil.walk_packages(coded_fl.__path__, "coded_fl."):
    importlib.import_module(mod.name)
assert not any(m == "flwr" or m.startswith("flwr.") for m in sys.modules), "flwr got imported"
import torch
F = coded_fl.PrimeField()
print(F.add(F.element([1]), F.element([2])).tolist())
"""


def test_core_imports_and_runs_without_flower():
    root = Path(coded_fl.__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=root, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[3]"


def test_no_source_file_of_the_core_mentions_flwr_imports():
    root = Path(coded_fl.__file__).resolve().parent
    modules = list(pkgutil.walk_packages([str(root)]))
    assert modules
    for path in root.rglob("*.py"):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            assert not stripped.startswith(("import flwr", "from flwr")), f"{path}: {line}"
