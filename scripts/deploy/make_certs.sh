#!/usr/bin/env bash
# Make a CA, the SuperLink's TLS certificate and one ECDSA P-384 auth key pair per SuperNode.
#
#   bash scripts/deploy/make_certs.sh DIR --host superlink.example.org --host 10.0.0.5 \
#        --node site0 --node site1 --node site2
#
# Every --host (DNS name or IP address the SuperNodes and `flwr` use) goes into the certificate's
# SANs (default: 127.0.0.1 and localhost). Writes DIR/ca.pem, DIR/ca.key, DIR/server.pem,
# DIR/server.key, DIR/nodes/NAME and DIR/nodes/NAME.pub (OpenSSH format). Give each site only
# ca.pem and its own private key; keep ca.key offline.
set -euo pipefail
source "$(dirname "$0")/common.sh"
[[ $# -ge 1 ]] || { sed -n '2,11p' "$0"; exit 2; }
out=$1
shift
exec "$py" -m simulations.deploy.certs --out "$out" "$@"
