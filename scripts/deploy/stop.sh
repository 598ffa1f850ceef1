#!/usr/bin/env bash
# Stop what the start_*.sh scripts started, by the PIDs they recorded in STATE_DIR.
#
#   bash scripts/deploy/stop.sh STATE_DIR          # every process recorded there
#   bash scripts/deploy/stop.sh STATE_DIR site1    # one of them
#
# Each is stopped as a process group (with the SuperExec/ClientApp/ServerApp processes it
# spawned): SIGTERM, then SIGKILL after 15 s. Nothing else is signalled.
set -euo pipefail
source "$(dirname "$0")/common.sh"
[[ $# -ge 1 ]] || { sed -n '2,8p' "$0"; exit 2; }
state=$1
shift
if [[ $# -gt 0 ]]; then
  for name in "$@"; do stop_one "$state" "$name"; done
  exit 0
fi
shopt -s nullglob
for f in "$state"/*.pid; do
  name=$(basename "$f" .pid)
  [[ $name == superlink ]] && continue  # the SuperLink last
  stop_one "$state" "$name"
done
stop_one "$state" superlink
