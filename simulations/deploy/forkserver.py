"""A fork server for ``flwr-clientapp`` in the deployment test bed (test and CI time only).

A Flower SuperNode (through its ``flower-superexec``) starts a new ``flwr-clientapp`` process
for every message to the node; the process handles that one message and exits. Before it
handles anything it imports Flower, torch and the app: about 2.5 s of CPU, every message, on
every node (measured in the slow test set: 109 such processes, 469 CPU seconds). This module
removes that repeated import and nothing else:

- ``Deployment(clientapp_forkserver=True)`` (or ``CODED_FL_CLIENTAPP_FORKSERVER=1`` in the
  environment, as ``.ci/run`` sets) puts a directory first on the SuperNodes' ``PATH`` whose
  ``flwr-clientapp`` is a small shim (:func:`write_shim`);
- the shim's first call on a node starts that node's *zygote* (``python -m
  simulations.deploy.forkserver serve``): a process with the node's own environment (so
  ``ATEN_CPU_CAPABILITY`` and the thread settings of a heterogeneous site are the ones torch
  reads at import) that imports Flower, torch and coded-fl once, then waits on a Unix socket;
- every call hands the zygote its arguments, environment, working directory and standard
  streams; the zygote forks, and the child runs Flower's own ``flwr-clientapp`` entry point with
  them, exactly as the stock process would after its imports. The shim relays signals to the
  child and exits with its exit status.

What stays real: the SuperLink, the SuperNodes and their SuperExec, Flower's ClientApp runtime
(``run_clientapp``: pulling the message, installing the FAB, loading the app, replying), the
app and its mods, one process per message. What changes: the process starts from a fork of a
process that has imported the libraries instead of from ``exec``. The zygote never runs a
kernel, a torch operation or a network call, so the child inherits no thread pool, connection
or random state of it (Python's ``random`` reseeds itself in a forked child; coded-fl draws
nothing from global generators). If the zygote cannot be started or reached, the shim execs the
stock ``flwr-clientapp``, so a run never depends on it. It lives with its node: it stays in the
node's process group (stopping the node's group stops it) and exits when the SuperExec that
started it is gone.

User-facing deployments (``scripts/deploy``, the guide) and full benchmark runs use the stock
process start; benchmark JSONs record ``clientapp_forkserver`` in their configuration.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import json
import os
import select
import signal
import socket
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ENV_FLAG", "ENV_SOCKET_DIR", "enabled", "serve", "write_shim"]

#: ``1`` turns the fork server on for :class:`simulations.deploy.launcher.Deployment`.
ENV_FLAG = "CODED_FL_CLIENTAPP_FORKSERVER"
#: Directory of the zygotes' sockets (one per SuperExec process id), set by the launcher.
ENV_SOCKET_DIR = "CODED_FL_FORKSERVER_DIR"
#: What a zygote imports once (every ClientApp of the project's apps needs these).
PRELOAD = ("numpy", "torch", "flwr.supernode.cli", "flwr.clientapp", "coded_fl", "clients")
#: What a forked child runs: Flower's own ``flwr-clientapp`` entry point.
ENTRY = "flwr.supernode.cli:flwr_clientapp"
#: Seconds a shim waits for a zygote it started to listen.
START_TIMEOUT = 60.0
#: Bytes of the request header (JSON) a shim may send.
MAX_HEADER = 1 << 20


def enabled(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    """Whether ``CODED_FL_CLIENTAPP_FORKSERVER`` asks for the fork server."""
    return environ.get(ENV_FLAG, "").strip().lower() in ("1", "true", "yes")


# ---------------------------------------------------------------------------------- the shim
_SHIM = """#!{python} -S
# flwr-clientapp through the bed's fork server (simulations/deploy/forkserver.py); falls back
# to the stock entry point {real} whenever the fork server cannot be used.
import json, os, signal, socket, subprocess, sys, time, fcntl
REAL = {real!r}
def stock():
    os.execv(REAL, [REAL] + sys.argv[1:])
folder = os.environ.get({env_dir!r})
if not folder:
    stock()
path = os.path.join(folder, "%d.sock" % os.getppid())
def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s
try:
    try:
        conn = connect()
    except OSError:
        with open(path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                conn = connect()
            except OSError:
                with open(os.path.join(folder, "zygote-%d.log" % os.getppid()), "ab") as log:
                    subprocess.Popen([{python!r}, "-m", "simulations.deploy.forkserver", "serve",
                                      "--socket", path, "--owner", str(os.getppid())],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log)
                deadline = time.monotonic() + {timeout}
                while True:
                    try:
                        conn = connect()
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.05)
    head = json.dumps({{"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd()}}).encode()
    socket.send_fds(conn, [len(head).to_bytes(4, "big") + head], [0, 1, 2])
    reader = conn.makefile("rb")
    child = int(json.loads(reader.readline())["pid"])
except (OSError, ValueError, KeyError):
    stock()
def relay(sig, frame):
    try:
        os.kill(child, sig)
    except OSError:
        pass
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(sig, relay)
line = reader.readline()
sys.exit(int(json.loads(line)["status"]) if line else 1)
"""


def write_shim(folder: str | os.PathLike[str], *, python: str, real: str) -> Path:
    """Write the ``flwr-clientapp`` shim into ``folder`` (put it first on a node's ``PATH``).

    Parameters
    ----------
    folder
        Where the executable ``flwr-clientapp`` is written (created).
    python
        The interpreter that runs the shim and the zygote (the one with Flower and coded-fl).
    real
        The stock ``flwr-clientapp`` executable, execed whenever the fork server is unusable.

    Returns
    -------
    Path
        The shim's path.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "flwr-clientapp"
    shim.write_text(
        _SHIM.format(python=python, real=real, env_dir=ENV_SOCKET_DIR, timeout=START_TIMEOUT)
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return shim


# ---------------------------------------------------------------------------------- the zygote
def _read_request(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    """One request: a 4-byte length, the JSON header, and the caller's stdin/stdout/stderr."""
    conn.settimeout(10.0)
    data, fds, _flags, _addr = socket.recv_fds(conn, MAX_HEADER + 4, 3)
    try:
        if len(fds) != 3 or len(data) < 4:
            raise ValueError("a length, a header and the three standard streams are needed")
        size = int.from_bytes(data[:4], "big")
        if size > MAX_HEADER:
            raise ValueError("request too large")
        body = data[4:]
        while len(body) < size:
            more = conn.recv(size - len(body))
            if not more:
                raise ValueError("request cut short")
            body += more
        return json.loads(body), fds
    except BaseException:  # a refused request leaves none of its descriptors open here
        for fd in fds:
            os.close(fd)
        raise


def _run_child(request: dict[str, object], fds: list[int], entry: str) -> None:
    """In the forked child: become the ``flwr-clientapp`` process the shim stands for."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})  # type: ignore[call-overload]
        os.chdir(str(request["cwd"]))
        sys.argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        module, _, name = entry.partition(":")
        getattr(importlib.import_module(module), name)()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # the child must never return into the zygote's loop
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


def serve(
    socket_path: str, owner: int, *, preload: Sequence[str] = PRELOAD, entry: str = ENTRY
) -> int:
    """Import ``preload``, then fork a ``flwr-clientapp`` for every shim that connects.

    Parameters
    ----------
    socket_path
        The Unix socket to listen on (the shim's ``<dir>/<SuperExec pid>.sock``).
    owner
        The SuperExec's process id: the zygote exits once that process is gone.
    preload
        Modules imported once, before the first fork.
    entry
        ``module:function`` a child calls with the shim's ``sys.argv`` (tests use a probe).

    Returns
    -------
    int
        The exit status (0 when the owner is gone).
    """
    for name in preload:
        importlib.import_module(name)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    waiting: dict[int, socket.socket] = {}  # child pid -> its shim's connection
    wake_r, wake_w = os.pipe()  # a child's end wakes the loop (SIGCHLD through the pipe)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    try:
        while _alive(owner) or waiting:
            ready, _, _ = select.select([listener.fileno(), wake_r], [], [], 0.5)
            if wake_r in ready:
                os.read(wake_r, 512)
            if listener.fileno() in ready and _alive(owner):
                conn, _ = listener.accept()
                try:
                    request, fds = _read_request(conn)
                except (OSError, ValueError) as exc:
                    print(f"forkserver: request refused: {exc}", file=sys.stderr, flush=True)
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    os.close(wake_r)
                    os.close(wake_w)
                    listener.close()
                    for other in waiting.values():
                        other.close()
                    conn.close()
                    _run_child(request, fds, entry)
                for fd in fds:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                waiting[pid] = conn
            _reap(waiting)
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
    return 0


def _reap(waiting: dict[int, socket.socket]) -> None:
    """Report every child that ended to its shim (exit status as a shell would give it)."""
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell says
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"status": code}).encode() + b"\n")
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m simulations.deploy.forkserver serve --socket PATH --owner PID``."""
    parser = argparse.ArgumentParser(prog="python -m simulations.deploy.forkserver")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="run one node's zygote")
    run.add_argument("--socket", required=True)
    run.add_argument("--owner", type=int, required=True)
    run.add_argument("--entry", default=ENTRY, help="module:function a child runs")
    args = parser.parse_args(argv)
    started = time.monotonic()
    code = serve(args.socket, args.owner, entry=args.entry)
    print(f"forkserver: done after {time.monotonic() - started:.0f} s", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
