#!/usr/bin/env bash
# Set up (if needed) and run the test suite: bash scripts/test.sh [pytest args]
# Default: every test that is not marked slow. CI (.ci/run) adds the slow ones: TEST_ALL=1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
py=${CODED_FL_PYTHON:-${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}}
py=${py:-.venv/bin/python}
source scripts/env.sh
if [[ "${TEST_ALL:-0}" == "1" ]]; then sel=(); else sel=(-m "not slow"); fi
exec "$py" -m pytest "${sel[@]}" "$@"
