"""ServerApp: place the data by coded shuffling, then rounds of coded secure aggregation; the
report (``report-file``) has every epoch's bytes and every round's outcome."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from strategies import CodedSecAgg, ShuffledTraining, ShuffleRelay

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    n = int(rc["num-silos"])
    strategy = CodedSecAgg.from_run_config(
        FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n),
        rc,
        progress=lambda rep: print(rep.line(), flush=True),
    )
    run = ShuffledTraining(
        strategy,
        ShuffleRelay(grid, stage_timeout=float(rc["stage-timeout"])),
        units_per_silo=int(rc["units-per-silo"]),
        reshuffle_every=int(rc["reshuffle-every"]),
        reshuffle=str(rc.get("reshuffle", "auto")),
        progress=lambda line: print(line, flush=True),
    )
    init = ArrayRecord({"w": Array(np.zeros(int(rc["dim"]), dtype=np.float32))})
    result = run.start(grid, init, int(rc["num-rounds"]))
    report = {
        "epochs": [
            {**e.__dict__, "complete": list(e.complete), "incomplete": list(e.incomplete)}
            for e in run.epochs
        ],
        "rounds": [
            {"ok": r.ok, "replies": r.replies_used, "stragglers": list(r.stragglers)}
            for r in run.reports
        ],
        "jobs": [res.job.to_json() for res in run.results],
        "parts": [list(p) for p in run.parts],
        "w": result.arrays["w"].numpy().tolist(),
        "done": True,
    }
    if rc["report-file"]:
        Path(str(rc["report-file"])).write_text(json.dumps(report))
