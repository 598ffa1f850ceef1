"""Run Flower apps with ``flwr run`` on a private local SuperLink (simulation mode).

What ``scripts/main.sh`` does, as a Python context manager for tests and benchmarks: a SuperLink
on free loopback ports in its own process group and a private ``FLWR_HOME``; ``run`` submits an
app and streams its output (bounded by a timeout); leaving the block stops the SuperLink and
everything it started (by process group, never by name).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

__all__ = ["LocalSuperLink", "offline_env"]


def offline_env(flwr_home: Path, python: Path | None = None) -> dict[str, str]:
    """The environment for offline, private Flower commands (``python``'s environment first on
    ``PATH``; default: this interpreter's)."""
    env = dict(os.environ)
    bindir = str(Path(python or sys.executable).parent)
    env.update(
        PATH=bindir + os.pathsep + env.get("PATH", ""),
        FLWR_HOME=str(flwr_home),
        FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_UPDATE_CHECK="1",
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO="0",
        HF_HUB_OFFLINE="1",
    )
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalSuperLink:
    """``with LocalSuperLink(home) as link: out = link.run(app_dir, ...)``.

    ``python`` runs Flower from another environment (its ``flower-superlink`` and ``flwr``, and
    its interpreter for everything they start); ``cwd`` is the working folder of all of them
    (default: this process's; Ray puts the driver's working folder on its workers' ``sys.path``).
    """

    def __init__(
        self,
        home: Path,
        *,
        start_timeout: float = 60.0,
        python: Path | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.home = Path(home)
        self.start_timeout = start_timeout
        self.port = _free_port()
        self.bindir = Path(python or sys.executable).parent
        self.cwd = cwd
        self.env = offline_env(self.home, python)
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LocalSuperLink:
        self.home.mkdir(parents=True, exist_ok=True)
        log = (self.home / "superlink.log").open("wb")
        cmd = [
            str(self.bindir / "flower-superlink"),
            "--insecure",
            "--simulation",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--control-api-address",
            f"127.0.0.1:{_free_port()}",
            "--database",
            str(self.home / "state.db"),
        ]
        self.proc = subprocess.Popen(
            cmd,
            env=self.env,
            cwd=self.cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        else:
            self.stop()
            raise RuntimeError(f"SuperLink did not start in {self.start_timeout}s")
        if self.proc.poll() is not None:
            tail = (self.home / "superlink.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"SuperLink exited at start:\n{tail}")
        (self.home / "config.toml").write_text(
            '[superlink]\ndefault = "local-test"\n\n[superlink.local-test]\n'
            f'address = "127.0.0.1:{self.port}"\ninsecure = true\n'
        )
        return self

    def run(
        self, app_dir: Path, *, num_supernodes: int, run_config: str = "", timeout: float = 600.0
    ) -> str:
        """``flwr run`` the app on this SuperLink with ``num_supernodes`` simulated nodes (all
        able to run at once); returns the streamed output. Raises on a non-zero exit or a
        timeout."""
        cmd = [
            str(self.bindir / "flwr"),
            "run",
            str(app_dir),
            "local-test",
            "--stream",
            "--federation-config",
            f"num_supernodes={num_supernodes} client_resources_num_cpus=1 "
            f"init_args_num_cpus={num_supernodes}",
        ]
        if run_config:
            cmd += ["--run-config", run_config]
        done = subprocess.run(
            cmd,
            env=self.env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        out = done.stdout + done.stderr
        if done.returncode != 0:
            raise RuntimeError(f"flwr run failed ({done.returncode}):\n{out[-4000:]}")
        return out

    def stop(self) -> None:
        """Stop the SuperLink's whole process group: TERM, a grace period, then KILL."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10.0)
        self.proc = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
