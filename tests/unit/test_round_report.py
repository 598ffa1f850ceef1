"""The progress line reports what a user needs to act on, with enough digits."""

from __future__ import annotations

from strategies.report import RoundReport


def test_a_small_clipped_fraction_is_shown_not_rounded_to_zero() -> None:
    rep = RoundReport(round=2, ok=True, silos=4, replies_used=3, clipped_fraction=4.2e-5)
    assert "clipped 0.0042% of entries" in rep.line()
    assert "clipped" not in RoundReport(round=2, ok=True, silos=4).line()


def test_the_round_line_prefers_the_server_side_accuracy() -> None:
    rep = RoundReport(
        round=1,
        ok=True,
        metrics={"train_acc": 0.1},
        evaluate_metrics={"eval_acc": 0.2},
        server_metrics={"accuracy": 0.3},
    )
    assert "accuracy=0.3000" in rep.line() and "eval_acc" not in rep.line()
    rep.server_metrics = {}
    assert "eval_acc=0.2000" in rep.line()
