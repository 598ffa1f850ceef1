"""Issue 28: no product module over 400 lines (``docs/architecture.md``).

A module that grows past the limit is split along its responsibilities, as the rest were; the
product is everything the wheel ships (``coded_fl``, ``coded_fl_flower``, ``strategies``,
``clients``), not the tests, simulations or scripts.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("coded_fl", "coded_fl_flower", "strategies", "clients")
MAX_LINES = 400


def _modules() -> list[Path]:
    return sorted(
        p for pkg in PRODUCT for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts
    )


def test_the_product_has_modules_to_check() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert {"coded_fl/__init__.py", "strategies/__init__.py", "clients/__init__.py"} <= names


def test_no_product_module_is_over_400_lines() -> None:
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"split these modules (lines): {long}"
