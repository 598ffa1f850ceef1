#!/usr/bin/env bash
# Start the SuperLink with TLS and SuperNode authentication, in the background.
#
#   bash scripts/deploy/start_superlink.sh CERT_DIR STATE_DIR [BIND_HOST] [PORT]
#
# Serves the Fleet, Control and Runtime APIs on BIND_HOST:PORT (default 127.0.0.1 and a free
# port) over HTTPS with CERT_DIR/server.pem (signed by CERT_DIR/ca.pem); only registered
# SuperNodes may connect. Log, PID and port go to STATE_DIR (superlink.log/.pid/.port); its
# state database is STATE_DIR/state.db. Stop it with scripts/deploy/stop.sh STATE_DIR.
set -euo pipefail
source "$(dirname "$0")/common.sh"
[[ $# -ge 2 ]] || { sed -n '2,10p' "$0"; exit 2; }
certs=$(cd "$1" && pwd)
mkdir -p "$2"
state=$(cd "$2" && pwd)
host=${3:-127.0.0.1}
port=${4:-$(free_port)}
start_bg "$state" superlink "$bindir/flower-superlink" \
  --ssl-ca-certfile "$certs/ca.pem" --ssl-certfile "$certs/server.pem" \
  --ssl-keyfile "$certs/server.key" --enable-supernode-auth \
  --host "$host" --port "$port" --database "$state/state.db" \
  --disable-runtime-dependency-installation
echo "$port" >"$state/superlink.port"
wait_log "$state/superlink.log" "Uvicorn running on" 60 "$(cat "$state/superlink.pid")"
echo "SuperLink running on https://$host:$port (pid $(cat "$state/superlink.pid"), log $state/superlink.log)"
