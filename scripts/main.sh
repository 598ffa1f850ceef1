#!/usr/bin/env bash
# Set up (if needed) and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
py=${CODED_FL_PYTHON:-${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}}
py=${py:-.venv/bin/python}
source scripts/env.sh
exec "$py" -m simulations.demo "$@"
