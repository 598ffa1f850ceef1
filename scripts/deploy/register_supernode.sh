#!/usr/bin/env bash
# Register a SuperNode's public key with the SuperLink (run where `flwr` can reach it).
#
#   FLWR_HOME=... bash scripts/deploy/register_supernode.sh CONNECTION KEY.pub NAME
set -euo pipefail
source "$(dirname "$0")/common.sh"
[[ $# -eq 3 ]] || { sed -n '2,4p' "$0"; exit 2; }
exec "$bindir/flwr" supernode register "$2" "$1" --name "$3"
