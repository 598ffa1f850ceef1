#!/usr/bin/env bash
# The whole guide on one machine: certificates and keys, a TLS SuperLink with SuperNode
# authentication, NODES registered SuperNodes, `flwr run`, and everything stopped at the end
# (also on failure or Ctrl-C) by the PIDs recorded in $DEPLOY_DIR/state.
#
#   bash scripts/deploy/local.sh                          # 3 nodes, the deployment app, coded-fl
#   NODES=3 bash scripts/deploy/local.sh -c 'mode="plain" num-rounds=2'
#   APP=. NODES=3 bash scripts/deploy/local.sh -c 'num-silos=3 num-stragglers=1 privacy-threshold=1'
#   NODE_ENV='ATEN_CPU_CAPABILITY=default;ATEN_CPU_CAPABILITY=avx2' APP=. NODES=6 \
#     bash scripts/deploy/local.sh -c 'num-stragglers=2 privacy-threshold=1'   # sites' CPUs differ
#
# Environment: NODES (3), APP (simulations/deploy/app), DEPLOY_DIR (.deploy), RUN_TIMEOUT
# (1800 s), KEEP=1 to leave the deployment running (stop it with scripts/deploy/stop.sh).
# NODE_ENV (unset: every node gets this shell's environment): per-node environment, a
# `;`-separated list of items, each space-separated KEY=VALUE assignments (values without
# spaces), cycled over the nodes: node i (site$i) gets item i % len on top of this shell's
# environment, and the ClientApp processes its SuperNode spawns inherit it. An empty item adds
# nothing. E.g. ATEN_CPU_CAPABILITY (default, avx2, ...: the CPU kernels torch uses) emulates
# sites whose CPUs differ.
# Extra arguments go to `flwr run` (e.g. -c 'key=value ...').
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
nodes=${NODES:-3}
app=${APP:-simulations/deploy/app}
dir=${DEPLOY_DIR:-$root/.deploy}
conn=local-tls
node_env=()  # NODE_ENV split at ';' (an empty item, also a trailing one, is kept)
if [[ -n ${NODE_ENV:-} ]]; then
  rest=$NODE_ENV
  while :; do
    node_env+=("${rest%%;*}")
    [[ $rest == *";"* ]] || break
    rest=${rest#*;}
  done
  for item in "${node_env[@]}"; do  # checked before anything starts
    read -ra words <<<"$item"
    for a in "${words[@]}"; do
      [[ $a =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "NODE_ENV: '$a' is not KEY=VALUE" >&2; exit 2; }
    done
  done
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
rm -rf "$dir/state" "$dir/flwr-home"
export FLWR_HOME="$dir/flwr-home"

node_args=()
for ((i = 0; i < nodes; i++)); do node_args+=(--node "site$i"); done
bash "$here/make_certs.sh" "$dir/certs" --host 127.0.0.1 --host localhost "${node_args[@]}"

bash "$here/start_superlink.sh" "$dir/certs" "$dir/state" 127.0.0.1
[[ ${KEEP:-0} == 1 ]] || trap 'bash "$here/stop.sh" "$dir/state"' EXIT
port=$(cat "$dir/state/superlink.port")
bash "$here/connect.sh" "$conn" "127.0.0.1:$port" "$dir/certs/ca.pem"

for ((i = 0; i < nodes; i++)); do
  bash "$here/register_supernode.sh" "$conn" "$dir/certs/nodes/site$i.pub" "site$i"
done
for ((i = 0; i < nodes; i++)); do
  extra=()
  ((${#node_env[@]} == 0)) || extra=("${node_env[i % ${#node_env[@]}]}")
  bash "$here/start_supernode.sh" "$dir/state" "site$i" "127.0.0.1:$port" "$dir/certs/ca.pem" \
    "$dir/certs/nodes/site$i" "site=$i partition-id=$i num-partitions=$nodes" "${extra[@]}"
done
"$bindir/flwr" supernode ls "$conn"

cd "$root"
timeout "${RUN_TIMEOUT:-1800}" "$bindir/flwr" run "$app" "$conn" --stream -c "num-silos=$nodes" "$@"
# `flwr run` exits 0 when the ServerApp failed (e.g. every round aborted): exit as the run ended
bash "$root/scripts/run_status.sh" "$conn" "$py"
