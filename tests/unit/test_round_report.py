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


def test_the_round_line_shows_the_straggler_tolerance_left_and_keyless_silos() -> None:
    # issue 32: a node without the mod never uploads: every round uses up the tolerance, and
    # the line must say so instead of "skipped 0 straggler(s)"
    rep = RoundReport(round=1, ok=True, silos=4, replies_used=3, tolerance=1, keyless=(3,))
    assert "tolerance left 0 of s=1: silo(s) [3] hold no key" in rep.line()
    rep = RoundReport(round=1, ok=True, silos=6, replies_used=5, stragglers=(2,), tolerance=2)
    assert "tolerance left 1 of s=2" in rep.line() and "hold no key" not in rep.line()
    # nothing used: nothing said
    assert (
        "tolerance"
        not in RoundReport(round=1, ok=True, silos=4, replies_used=4, tolerance=1).line()
    )


def test_a_failed_key_exchange_says_which_silos_have_no_key_and_why_first() -> None:
    from strategies.membership import key_failure

    trace = "Traceback (most recent call last):\n  File 'app.py', line 3\n" * 50
    nomod = key_failure(
        [0, 1],
        {0: trace + "KeyError: 'arrays'", 1: trace + "KeyError: 'arrays'"},
        {0: 10, 1: 11},
        "only 0 silos have keys",
    )
    assert nomod.startswith("key exchange: silo(s) [0, 1] sent no key")
    assert "lacks coded_fl_flower.coded_secagg_mod" in nomod
    assert "silo(s) [0, 1] (node(s) [10, 11]): KeyError: 'arrays'" in nomod
    assert "Traceback" not in nomod and len(nomod) < 1000  # tracebacks go to the debug log
    order = key_failure(
        [2],
        {2: trace + "KeyError: 'fixedclipping_mod requires the key clipping_norm'"},
        {2: 12},
        "only 3 silos have keys",
    )
    assert "does not run coded_fl_flower.coded_secagg_mod first" in order
    refused = key_failure(
        [0],
        {
            0: "<class 'coded_fl.errors.RemoteProtocolError'>:<'silo -1: T = 0 is below "
            + "minimum "
            + "x" * 300
            + ": or set node config codedfl.allow-no-privacy = true'>"
        },
        {0: 10},
        "only 3 silos have keys",
    )
    assert "refused the server's configuration" in refused
    assert "codedfl.allow-no-privacy = true" in refused and "<class" not in refused
    silent = key_failure([4], {}, {4: 14}, "only 3 silos have keys")
    assert "no reply in time" in silent and "key_timeout" in silent
