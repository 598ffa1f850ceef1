#!/usr/bin/env bash
# Start one SuperNode (a site) with TLS and its authentication key, in the background.
#
#   bash scripts/deploy/start_supernode.sh STATE_DIR NAME SUPERLINK_HOST:PORT CA_PEM PRIVATE_KEY \
#        "site=0 partition-id=0 num-partitions=3"
#
# The last argument is the node config the ClientApp reads (context.node_config). Log and PID go
# to STATE_DIR/NAME.log and NAME.pid; stop it with scripts/deploy/stop.sh STATE_DIR NAME.
set -euo pipefail
source "$(dirname "$0")/common.sh"
[[ $# -eq 6 ]] || { sed -n '2,8p' "$0"; exit 2; }
mkdir -p "$1"
state=$(cd "$1" && pwd)
name=$2
port=$(free_port)  # this node's ClientApp I/O API (local to the site)
start_bg "$state" "$name" "$bindir/flower-supernode" --superlink "$3" \
  --root-certificates "$4" --auth-supernode-private-key "$5" --port "$port" \
  --node-config "$6"
wait_log "$state/$name.log" "SuperNode ID: [0-9]+" 90 "$(cat "$state/$name.pid")"
echo "SuperNode $name connected (pid $(cat "$state/$name.pid"), log $state/$name.log)"
