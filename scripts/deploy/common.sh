# Shared by the scripts in scripts/deploy (sourced, not run): the interpreter, PATH, offline
# Flower settings, and process helpers that only ever signal PIDs recorded in a state dir.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${CODED_FL_PYTHON:-${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}}
py=${py:-$root/.venv/bin/python}
bindir=$(dirname "$py")
export PATH="$bindir:$PATH"
# shellcheck source=../env.sh
source "$root/scripts/env.sh"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"

free_port() {
  "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_log FILE REGEX SECONDS PID: until FILE matches REGEX; fails if PID exits or time runs out
wait_log() {
  local file=$1 rx=$2 secs=$3 pid=$4 end=$((SECONDS + $3))
  while ((SECONDS < end)); do
    grep -aqE "$rx" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "process $pid exited; end of $file:" >&2; tail -n 20 "$file" >&2; return 1; }
    sleep 0.3
  done
  echo "no /$rx/ in $file within ${secs}s; end of it:" >&2
  tail -n 20 "$file" >&2
  return 1
}

# start_bg STATE_DIR NAME CMD...: start CMD in its own session, log and PID under STATE_DIR
start_bg() {
  local dir=$1 name=$2
  shift 2
  mkdir -p "$dir"
  setsid "$@" >>"$dir/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/$name.pid"
  echo "$*" >"$dir/$name.cmd"
}

# stop_one STATE_DIR NAME: SIGTERM the recorded process group, SIGKILL after 15 s
stop_one() {
  local dir=$1 name=$2 pid
  [[ -f "$dir/$name.pid" ]] || return 0
  pid=$(cat "$dir/$name.pid")
  # only if that PID still runs a Flower command (not a reused PID)
  if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qE 'flower-|flwr|netem'; then
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 75); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$dir/$name.pid"
  echo "stopped $name (process group $pid)"
}
