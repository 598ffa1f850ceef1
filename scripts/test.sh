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
# one worker per core (TEST_WORKERS=0: in this process); a module's tests stay on one worker,
# so its module-scoped fixtures (a Flower simulation, a wheel) run once
par=(-n "${TEST_WORKERS:-auto}" --dist loadscope)
exec "$py" -m pytest "${sel[@]}" "${par[@]}" "$@"
