#!/usr/bin/env bash
# Start one SuperNode (a site) with TLS and its authentication key, in the background.
#
#   bash scripts/deploy/start_supernode.sh STATE_DIR NAME SUPERLINK_HOST:PORT CA_PEM PRIVATE_KEY \
#        "site=0 partition-id=0 num-partitions=3" ["ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=2"]
#
# The 6th argument is the node config the ClientApp reads (context.node_config). The optional
# 7th is this site's own environment: space-separated KEY=VALUE assignments (values without
# spaces) added to the SuperNode's environment, which the ClientApp processes it spawns inherit.
# Log and PID go to STATE_DIR/NAME.log and NAME.pid; stop it with
# scripts/deploy/stop.sh STATE_DIR NAME.
# Authenticated keys: unless the node config sets them, the site signs its key-agreement keys
# with PRIVATE_KEY (codedfl.identity-key) and trusts the public keys in $TRUSTED_KEYS, by
# default PRIVATE_KEY's folder, where make_certs.sh writes every node's .pub
# (codedfl.trusted-keys).
set -euo pipefail
source "$(dirname "$0")/common.sh"
[[ $# -eq 6 || $# -eq 7 ]] || { sed -n '2,15p' "$0"; exit 2; }
mkdir -p "$1"
state=$(cd "$1" && pwd)
name=$2
keydir=$(cd "$(dirname "$5")" && pwd)
node_config=$6
[[ $node_config == *codedfl.identity-key=* ]] ||
  node_config+=" codedfl.identity-key=\"$keydir/$(basename "$5")\""
[[ $node_config == *codedfl.trusted-keys=* ]] ||
  node_config+=" codedfl.trusted-keys=\"${TRUSTED_KEYS:-$keydir}\""
assigns=()
read -ra assigns <<<"${7:-}"
for a in "${assigns[@]}"; do
  [[ $a =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || {
    echo "start_supernode.sh: '$a' is not a KEY=VALUE assignment (7th argument: '${7:-}')" >&2
    exit 2
  }
done
port=$(free_port)  # this node's ClientApp I/O API (local to the site)
# `env K=V ... flower-supernode` execs flower-supernode: the recorded PID stays the SuperNode's
start_bg "$state" "$name" env "${assigns[@]}" "$bindir/flower-supernode" --superlink "$3" \
  --root-certificates "$4" --auth-supernode-private-key "$5" --port "$port" \
  --node-config "$node_config"
wait_log "$state/$name.log" "SuperNode ID: [0-9]+" 90 "$(cat "$state/$name.pid")"
echo "SuperNode $name connected (pid $(cat "$state/$name.pid"), log $state/$name.log${7:+, environment: $7})"
