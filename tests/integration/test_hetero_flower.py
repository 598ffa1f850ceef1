"""Sites whose machines differ, through the Flower simulation engine (issue 12).

The main job's CNN and data, 4 silos, s = 1, half the silos computing convolutions with oneDNN's
kernels and half with ATen's own (``--conv-per-silo onednn,native``) and with 1 and 2 torch
threads (``--threads-per-silo 1,2``), so the replicas of every partition are computed with
different kernels and are not bit-identical, as on sites whose CPUs differ. (Thread counts alone
did not make them differ on a quiet machine: OpenMP's teams follow the load, so the test bed
was flaky; the kernels differ at most coordinates of every gradient.) One run with the default
code: the test bed itself is checked first (the server saw replicas of a partition disagree),
then that every round completed, no silo was blamed for drift, at most the bounded 1 % of
coordinates was erased, and the model learns like plain FedAvg on the same data.
"""

from __future__ import annotations

import json

import pytest

from simulations.runtime.flower_sim import run_child

# a Flower simulation of the main CNN (1-3 minutes on 2 cores): CI's slow set
pytestmark = [pytest.mark.integration, pytest.mark.slow]

ARGS = ["--silos", "4", "--s", "1", "--rounds", "3", "--epochs", "2", "--lr", "0.1"]
ARGS += ["--threads-per-silo", "1,2", "--conv-per-silo", "onednn,native", "--actors", "1"]
# one reply beyond n - s, waited for up to 240 s: every round waits for all four silos, so both
# groups' replicas are compared in every round, group-masked or not. With one actor the silos
# train one after another, so the fourth reply comes a whole local training after the third:
# the default 2 s extra wait missed it in every round of a CI run (used 3/4 three times,
# disagreeing [0, 0, 0]); the wait ends as soon as the reply is in, so it costs nothing here
ARGS += ["--extra", "1", "--extra-wait", "240"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("hetero") / "run.json"
    rc = run_child("simulations.accuracy.flower", [*ARGS, "--out", str(out)], timeout=600)
    assert rc == 0 and out.exists(), f"simulation failed (exit status {rc})"
    return json.loads(out.read_text())


def test_the_test_bed_makes_replicas_disagree(run):
    # every round uses all 4 replies and compares both groups of 2 (one silo with oneDNN's
    # kernels, one with ATen's), and their replicas differ (9232, 63, 5970 coordinates in the
    # three rounds here)
    assert run["ours"]["used"] == [4, 4, 4], run["ours"]
    # not every round: a CI run saw a round with all 4 replies whose compared replicas agreed
    # bit for bit (rounds with shared masks compare one group only, |S| - (n - s) = 1 row).
    # The kernels follow the code's silo index (the server's silo order), not the partition-id:
    # by partition-id, a group's two members got the same kernels and threads whenever the
    # random node ids paired partition-ids of one parity (a CI run: disagreeing [0, 0, 0])
    assert sum(run["ours"]["disagreeing"]) > 0, run["ours"]


def test_every_round_completes_with_heterogeneous_silos_and_drift_is_never_blamed(run):
    raw = run
    assert raw["ours"]["ok"] == [True] * 3, raw["ours"]
    # drift is never taken for a deviating silo: nobody named, nobody left out
    assert raw["ours"]["offenders"] == [[], [], []], raw["ours"]
    assert raw["ours"]["excluded"] == [[], [], []], raw["ours"]
    # groups of two have no majority: a coordinate where the two replicas drifted apart beyond
    # the tolerance is erased (no update there this round), within max_erased_fraction = 1 %.
    # Almost always none is; a CI run of this bed erased 6 of 11,122 in one round (replicas
    # trained with oneDNN's and ATen's kernels drift chaotically at a few coordinates)
    bound = 0.01 * raw["model_parameters"]
    assert all(e <= bound for e in raw["ours"]["erased"]), (raw["ours"]["erased"], bound)
    # and it learns like plain FedAvg on the same data. One round's accuracy is a noisy figure
    # here (replicas trained with different kernels drift chaotically): single rounds of this
    # bed fell 4.5 pp (0.880 vs 0.925, round 2 of one run) and 5.2 pp (0.896 vs 0.948, round 3
    # of a CI run) below plain FedAvg's while the other rounds agreed within 1.5 pp; so the
    # mean over the rounds is compared (three runs on 2026-11-27: -1.0, -0.2 and +0.1 pp), and
    # the final model must have learned
    ours, plain = raw["ours"]["accuracy"], raw["plain"]["accuracy"]
    gap = sum(ours) / len(ours) - sum(plain) / len(plain)
    assert gap > -0.03, (ours, plain)
    assert ours[-1] > 0.85, (ours, plain)
