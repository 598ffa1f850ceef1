# Offline, private Flower settings shared by the scripts (sourced, not run).
export FLWR_TELEMETRY_ENABLED=0
export FLWR_DISABLE_UPDATE_CHECK=1
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export RAY_DEDUP_LOGS=0 RAY_USAGE_STATS_ENABLED=0
export PYTHONHASHSEED=${PYTHONHASHSEED:-0}
export RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0
# Ray's bookkeeping that no run here reads (simulations/runtime/flower_sim.py, LEAN_RAY_ENV:
# the same four): no workers prestarted for the first driver, no metrics collection, no event
# loop statistics, no task events reported to the GCS (the quick rounds benchmark: 172 -> 147
# CPU seconds; nothing measurable where training dominates)
export RAY_prestart_worker_first_driver=0 RAY_enable_metrics_collection=0 RAY_event_stats=0
export RAY_task_events_report_interval_ms=0
# numba's compiled kernels: one folder for every copy of the code (coded_fl/kernels/cache.py),
# filled by scripts/setup.sh
export CODED_FL_KERNEL_CACHE=${CODED_FL_KERNEL_CACHE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.kernel-cache}
# cache bytecode even where the machine turns it off (PYTHONDONTWRITEBYTECODE, as on CI's): a
# run starts many processes (Ray workers, SuperNodes, a ClientApp per message, xdist workers),
# each of which otherwise compiles what it imports that no set-up compiled (the test modules'
# assertion rewrite included)
unset PYTHONDONTWRITEBYTECODE
