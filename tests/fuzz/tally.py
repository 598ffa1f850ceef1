"""What the fuzz tests saw: mutants per message type and end, where each was refused, and the
classes of the accepted ones (printed by ``tests/fuzz/conftest.py`` in the long profile, and
written as JSON to ``CODEDFL_FUZZ_REPORT`` if set)."""

from __future__ import annotations

from collections import Counter

#: (end, message type, outcome, class) -> mutants
COUNTS: Counter[tuple[str, str, str, str]] = Counter()
#: (end, message type) -> the largest decode time (s), handling time (s) and traced peak (B)
WORST: dict[tuple[str, str], list[float]] = {}


def record(end: str, kind: str, outcome: str, what: str = "") -> None:
    """Count one mutant."""
    COUNTS[(end, kind, outcome, what)] += 1


def worst(end: str, kind: str, decode_s: float, handle_s: float, peak: int) -> None:
    """Keep the worst cost seen for (end, kind)."""
    w = WORST.setdefault((end, kind), [0.0, 0.0, 0.0])
    w[0], w[1], w[2] = max(w[0], decode_s), max(w[1], handle_s), max(w[2], float(peak))
