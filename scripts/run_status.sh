#!/usr/bin/env bash
# Exit non-zero unless the newest run on a SuperLink connection finished completed.
#
#   bash scripts/run_status.sh CONNECTION [PYTHON]
#
# `flwr run --stream` exits 0 even when the ServerApp failed (Flower's behaviour): a run whose
# rounds cannot complete raises in the ServerApp (coded-fl stops after max_aborted_rounds
# rounds in a row), the SuperLink records it as failed, and this asks it how the run ended.
# Needs FLWR_HOME set as for `flwr run`.
set -euo pipefail
conn=$1
py=${2:-python3}
status=$(flwr ls "$conn" --format json 2>/dev/null | "$py" -c '
import json, sys
try:
    out = json.loads(sys.stdin.read() or "{}")
except ValueError:
    out = {}
runs = sorted(out.get("runs", []), key=lambda r: int(r.get("run-id", 0)))
print(runs[-1].get("status", "unknown") if runs else "unknown")
')
if [[ "$status" != *completed* ]]; then
  echo "the run ended as '$status' (see the error above); list the runs with: flwr ls $conn" >&2
  exit 1
fi
