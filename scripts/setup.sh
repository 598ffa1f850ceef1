#!/usr/bin/env bash
# Set up coded-fl on this machine: a Python environment with torch, Flower and the package.
#
#   bash scripts/setup.sh            # idempotent; quick when nothing changed
#
# Where it installs:
#   - into the active virtual environment when one is active ($VIRTUAL_ENV), or into the
#     interpreter named by CODED_FL_PYTHON;
#   - otherwise into ./.venv (created here).
# torch:
#   - an importable torch (e.g. your own CUDA build) is left alone;
#   - with no torch and no NVIDIA driver, torch==2.13.0 is installed first, from the CPU wheel
#     index when it is reachable (or CODED_FL_TORCH_INDEX), so no CUDA packages are pulled;
#   - with no torch and an NVIDIA driver (nvidia-smi works), the default CUDA build is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [[ -n "${CODED_FL_PYTHON:-}" ]]; then
  py="$CODED_FL_PYTHON"
elif [[ -n "${VIRTUAL_ENV:-}" ]]; then
  py="$VIRTUAL_ENV/bin/python"
else
  base=${PYTHON:-python3}
  command -v "$base" >/dev/null || { echo "setup: no '$base' found; install Python >= 3.10 or set PYTHON=/path/to/python" >&2; exit 1; }
  if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv with $("$base" --version 2>&1)"
    "$base" -m venv .venv
  fi
  py="$root/.venv/bin/python"
fi
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { echo "setup: Python >= 3.10 is required ($py)" >&2; exit 1; }

# numba's on-disk cache of the CPU kernels (keyed by the kernel, its argument types and a hash of
# the source file; in $CODED_FL_KERNEL_CACHE, which scripts/main.sh sets too, so that the
# ClientApps and the ServerApp's copy of the code from the app bundle share it:
# coded_fl/kernels/cache.py): filled once here, so that no process of a run compiles (a fresh
# clone's first run otherwise compiles every kernel in every silo at once); filled again when
# the kernel file changed (an edit between two set-ups also recompiles at run time, once)
export CODED_FL_KERNEL_CACHE="${CODED_FL_KERNEL_CACHE:-$root/.kernel-cache}"
fill_kernel_cache() {
  local kstamp="$root/.codedfl-kernels-stamp" kwant
  kwant="$("$py" -c 'import sys; print(sys.executable)') $CODED_FL_KERNEL_CACHE $(cat coded_fl/kernels/*.py simulations/runtime/kernel_cache.py | sha256sum | cut -c1-16)"
  if [[ -f "$kstamp" && "$(cat "$kstamp")" == "$kwant" ]] && compgen -G "$CODED_FL_KERNEL_CACHE/cpu.*.nbi" >/dev/null; then
    return 0
  fi
  "$py" -m simulations.runtime.kernel_cache
  echo "$kwant" > "$kstamp"
}

# the project's own bytecode: an editable install leaves its sources uncompiled, and where
# PYTHONDONTWRITEBYTECODE is set (as on CI's machines) no process caches it, so every ClientApp,
# Ray worker and SuperNode process compiled coded_fl and the adapters again (about 1 s of CPU
# each). compileall writes whatever the variable says and skips what is current; a source
# edited later is compiled in memory until the next set-up (or written, where caching is on)
compile_sources() {
  "$py" -m compileall -q -j 0 coded_fl coded_fl_flower strategies clients simulations >/dev/null
}

stamp="$root/.codedfl-setup-stamp"
want="$("$py" -c 'import sys; print(sys.executable)') $(sha256sum pyproject.toml | cut -c1-16)"
# (run from outside the checkout: coded_fl must resolve to this checkout's copy; a set-up run
# from another clone with the same interpreter repoints the editable install there)
installed() {
  (cd / && "$py" -c 'import sys, pathlib, coded_fl, torch, flwr, galois
sys.exit(pathlib.Path(coded_fl.__file__).resolve().parents[1] != pathlib.Path(sys.argv[1]).resolve())' "$root") 2>/dev/null
}
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && installed; then
  compile_sources
  fill_kernel_cache
  exit 0
fi

if "$py" -c 'import torch' 2>/dev/null; then
  echo "setup: keeping the installed torch $("$py" -c 'import torch; print(torch.__version__)')"
elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "setup: NVIDIA driver found; installing the default (CUDA) torch build"
  "$py" -m pip install "torch>=2.3"
else
  index=${CODED_FL_TORCH_INDEX:-}
  if [[ -z "$index" ]] && "$py" - <<'PY' 2>/dev/null
import sys, urllib.request
try:
    urllib.request.urlopen("https://download.pytorch.org/whl/cpu/torch/", timeout=3)
except Exception:
    sys.exit(1)
PY
  then
    index="https://download.pytorch.org/whl/cpu"
  fi
  echo "setup: no GPU; installing the CPU build torch==2.13.0${index:+ from $index}"
  if [[ -n "$index" ]]; then
    "$py" -m pip install --index-url "$index" --extra-index-url https://pypi.org/simple "torch==2.13.0"
  else
    "$py" -m pip install "torch==2.13.0"
  fi
fi

echo "setup: installing coded-fl and its dependencies"
# with uv (Flower itself depends on it, so it adds nothing to the environment), much faster than
# pip for the same set; pip when uv cannot be had or cannot reach an index (uv reads no pip.conf:
# a pip-only mirror), or when CODED_FL_INSTALLER=pip. --compile-bytecode: uv, unlike pip, writes
# no .pyc by default, and where PYTHONDONTWRITEBYTECODE is set (as on CI's machines) no process
# would ever cache one: every ClientApp and Ray worker would compile Flower, Ray and the rest
# from source at every start (CI's default suite 3:20 -> 4:36, deployments' first rounds late)
if [[ "${CODED_FL_INSTALLER:-uv}" == "uv" ]] && "$py" -m pip install -q "uv>=0.5" \
  && "$py" -m uv pip install --python "$py" -q --compile-bytecode -e ".[test]"; then
  :
else
  echo "setup: installing with pip"
  "$py" -m pip install -q -e ".[test]"
fi
"$py" -c 'import coded_fl, torch, flwr, galois, numba, cryptography; print("setup: ok (torch", torch.__version__, "| flwr", flwr.__version__, "| python", __import__("sys").version.split()[0] + ")")'
echo "$want" > "$stamp"
compile_sources
fill_kernel_cache
