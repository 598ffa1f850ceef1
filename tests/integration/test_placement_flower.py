"""Coded shuffling inside the training workflow on Flower's simulation engine (issue 17).

One run of the main job's apps (:mod:`simulations.placement.flower`), 4 silos starting with
their own Dirichlet data, s = 1, the polynomial code (overlapping supports, so the reshuffle is
coded: pairs of units as one XOR each, issue 31): silo 2 drops during the placement's delivery.
It must hold only its own data afterwards, sit round 1 out as a straggler (its train function
refuses the partition it lacks; the round still completes from the others), be repaired by the
coded reshuffle before round 2, and train in round 2.
"""

from __future__ import annotations

import json

import pytest

from coded_fl.shuffling import ShuffleJob
from simulations.runtime.flower_sim import run_child

# a Flower simulation with a reshuffle (about 50 s): CI's slow set
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_silo_that_misses_the_placement_is_a_straggler_until_the_reshuffle(tmp_path):
    out = tmp_path / "run.json"
    args = ["--silos=4", "--s=1", "--T=1", "--rounds=2", "--every=1", "--epochs=1", "--units=3"]
    args += ["--code=polynomial", "--reshuffle=coded"]
    args += ["--drop-silo=2", "--drop-epoch=1", "--out", str(out)]
    assert run_child("simulations.placement.flower", args, timeout=280) == 0
    raw = json.loads(out.read_text())
    placement, reshuffle = raw["shuffles"]
    assert placement["incomplete"] == [2]  # the others hold their code's partitions
    assert placement["load"] == placement["formula_load"]
    assert raw["rounds_ok"] == [True, True]  # round 1 completes without silo 2
    assert 2 in raw["stragglers"][0]
    assert "not in this silo's store" in raw["round_errors"][0].get("2", "")
    assert reshuffle["incomplete"] == []  # repaired by the next reshuffle
    assert reshuffle["load"] == reshuffle["formula_load"]
    job = ShuffleJob.from_json(raw["jobs"][1])
    fanout = sum(1 for a, b in zip(job.current, job.target, strict=True) if not b <= a)
    assert reshuffle["load"] < fanout  # pairs went as one XOR each, through Flower's relay
    assert "2" not in raw["round_errors"][1]
    assert raw["accuracy"][-1] > raw["accuracy"][0]
