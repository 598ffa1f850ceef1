#!/usr/bin/env bash
# Set up (if needed) and run the main job: a Flower simulation (Ray backend) of coded secure
# aggregation on real MNIST digits, 10 silos, s = 2, two slow sites and one that drops, then plain
# FedAvg on the same data and seeds, and a summary.
#
#   bash scripts/main.sh                       # the defaults of [tool.flwr.app.config]
#   bash scripts/main.sh -c "num-rounds=4"     # extra arguments go to `flwr run`
#   NUM_SUPERNODES=20 bash scripts/main.sh -c "num-silos=20"
#
# Offline and private: telemetry and update checks off, a private FLWR_HOME, its own SuperLink on
# free loopback ports, stopped (with everything it started) when the job ends or fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bash scripts/setup.sh
py=${CODED_FL_PYTHON:-${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}}
py=${py:-$root/.venv/bin/python}
bindir=$(dirname "$py")
export PATH="$bindir:$PATH"
source scripts/env.sh
export FLWR_HOME="$root/.flwr-home"
# (env.sh: CODED_FL_KERNEL_CACHE, the kernels' compiled code that setup.sh filled, shared by the
# ClientApps and the ServerApp, which imports the copy Flower unpacks from the app bundle)
mkdir -p "$FLWR_HOME"
nodes=${NUM_SUPERNODES:-10}

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }
port=$(free_port)
control=$(free_port)
log="$FLWR_HOME/superlink.log"
rm -f "$FLWR_HOME/state.db"

echo "main: starting a SuperLink (simulation) on 127.0.0.1:$port (log: $log)"
setsid "$bindir/flower-superlink" --insecure --simulation --host 127.0.0.1 --port "$port" \
  --control-api-address "127.0.0.1:$control" --database "$FLWR_HOME/state.db" >"$log" 2>&1 &
pid=$!
stop() {
  # the SuperLink and everything it started (SuperExec, the simulation, Ray) share its group
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL -- "-$pid" 2>/dev/null || true
}
trap stop EXIT

ready=0
for _ in $(seq 1 150); do
  if "$py" - "$port" <<'PY' 2>/dev/null; then ready=1; break; fi
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=1)
PY
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
if [[ $ready != 1 ]]; then
  echo "main: the SuperLink did not start; the end of its log ($log):" >&2
  tail -n 20 "$log" >&2 || true
  exit 1
fi

cat >"$FLWR_HOME/config.toml" <<EOF
[superlink]
default = "codedfl"

[superlink.codedfl]
address = "127.0.0.1:$port"
insecure = true
EOF

# Ray sees $nodes virtual CPUs so that every silo's ClientApp can run at once on this machine
# (slow sites only sleep: they must not hold the real cores the others train on).
# launch-time: the summary counts what you wait for from here (a -c of yours comes after it)
flwr run . codedfl --stream \
  --federation-config "num_supernodes=$nodes client_resources_num_cpus=1 init_args_num_cpus=$nodes" \
  -c "launch-time=$(date +%s.%N)" "$@"

# `flwr run --stream` exits 0 even when the ServerApp failed: ask the SuperLink how the run
# ended, and exit non-zero unless it finished completed.
bash scripts/run_status.sh codedfl "$py" || { echo "main: the run did not complete" >&2; exit 1; }
