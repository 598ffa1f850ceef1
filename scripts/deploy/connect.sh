#!/usr/bin/env bash
# Write the `flwr` connection to a TLS SuperLink into $FLWR_HOME/config.toml (made the default).
#
#   FLWR_HOME=~/.flwr bash scripts/deploy/connect.sh NAME HOST:PORT CA_PEM
set -euo pipefail
[[ $# -eq 3 ]] || { sed -n '2,4p' "$0"; exit 2; }
: "${FLWR_HOME:?set FLWR_HOME to the flwr config directory}"
ca=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
mkdir -p "$FLWR_HOME"
cat >"$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "$1"

[superlink.$1]
address = "$2"
root-certificates = "$ca"
TOML
echo "wrote $FLWR_HOME/config.toml: connection '$1' -> $2 (TLS, CA $ca)"
