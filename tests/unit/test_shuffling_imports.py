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


#: coded_fl.shuffling's layers, bottom up (its package docstring): a module may import its own
#: layer and the layers below, never one above.
SHUFFLING_LAYERS = ("plan", "codec", "storage", "transport", "partitions")


def _shuffling_layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["coded_fl", "shuffling"] or len(parts) < 3:
        return None
    return SHUFFLING_LAYERS.index(parts[2])


def test_each_shuffling_layer_imports_only_the_layers_below_it():
    import ast

    base = ROOT / "coded_fl" / "shuffling"
    seen: dict[str, set[str]] = {}
    for path in base.rglob("*.py"):
        if path.name == "__init__.py" and path.parent == base:
            continue  # the package re-exports every layer
        rel = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        mine = _shuffling_layer(rel)
        assert mine is not None, f"{rel} is in no layer of {SHUFFLING_LAYERS}"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{rel}: a relative import hides its layer"
                targets = [node.module or ""]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                theirs = _shuffling_layer(target)
                if theirs is not None:
                    seen.setdefault(SHUFFLING_LAYERS[mine], set()).add(SHUFFLING_LAYERS[theirs])
                    assert theirs <= mine, (
                        f"{rel} ({SHUFFLING_LAYERS[mine]}) imports {target} "
                        f"({SHUFFLING_LAYERS[theirs]}), a layer above it"
                    )
    # the check is not vacuous: the upper layers do use the lower ones
    assert {"plan", "codec", "storage"} <= seen["transport"], seen
    assert {"plan", "codec"} <= seen["storage"], seen
