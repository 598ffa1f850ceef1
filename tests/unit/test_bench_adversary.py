"""The adversary benchmark's core (``simulations.bench.adversary.run_case``) on a small slice:
the real driver and ClientApps in process, one malicious silo, the oracle's exact sums."""

from __future__ import annotations

from simulations.bench.adversary import CULPRIT, Size, run_case, summary

#: n = 6 (groups (0, 1, 2), (3, 4, 5)), 4 rounds: rounds 1-2 with shared masks, 3-4 aligned.
SMALL = Size(silos=6, rounds=4, examples=64)


def test_a_wrong_replica_never_gives_a_wrong_sum_and_is_named_then_left_out() -> None:
    case = run_case("wrong replica", "auto", SMALL, say=lambda line: None)
    rows = case.rounds
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    # whatever the round did, no completed round applied a value the oracle does not give
    assert all(r["wrong_coordinates"] == 0 for r in rows if r["ok"])
    # every upload in, so every member of its group is compared (also with the shared masks
    # of round 1): the group's majority overrules it, the sum is exact and it is named, then
    # left out of every later round
    assert rows[0]["acted"] and rows[0]["ok"] and rows[0]["exact"]
    assert CULPRIT in rows[0]["offenders"]
    assert all(r["ok"] and r["exact"] and CULPRIT in r["excluded"] for r in rows[1:])
    row = summary(case)
    assert row["wrong_sums"] == 0 and row["left_out_from"] == 2 and row["first_acted"] == 1


def test_a_crafted_recovery_reply_is_located_and_the_sums_stay_exact() -> None:
    small = Size(silos=6, rounds=2, examples=64)
    case = run_case("crafted recovery reply", "shares", small, say=lambda line: None)
    first, second = case.rounds
    assert first["acted"] and first["ok"] and first["exact"] and CULPRIT in first["offenders"]
    assert second["ok"] and second["exact"] and CULPRIT in second["excluded"]
    assert not second["acted"]  # left out: no recovery request reaches it


def test_a_false_accuser_is_named_and_left_out_the_round_after() -> None:
    # the culprit refuses every recovery with an accusation of honest silo 0: silo 0 reveals
    # the disputed share's key, the share opens, and the culprit is named (issue 27, item 4)
    small = Size(silos=6, rounds=2, examples=16)
    case = run_case("false accusations", "shares", small, say=lambda line: None)
    first, second = case.rounds
    assert first["acted"] and first["ok"] and first["exact"] and CULPRIT in first["offenders"]
    assert any(f"silo {CULPRIT} lied" in v for v in first["verdicts"])
    assert second["ok"] and second["exact"] and CULPRIT in second["excluded"]
    assert not second["acted"]  # left out: no recovery request reaches it
    row = summary(case)
    assert row["named_rounds"] == row["acted_rounds"] == 1 and row["rounds_to_leave_out"] == 1
