"""Start, run and stop a real Flower deployment: one SuperLink, SuperNodes, ``flwr run``.

A :class:`Deployment` owns one run directory::

    RUN_DIR/creds/          CA, server certificate, SuperNode keys (simulations.deploy.certs)
    RUN_DIR/home/           FLWR_HOME: config.toml with the connection, installed FABs
    RUN_DIR/logs/NAME.log   one log per process
    RUN_DIR/pids.json       every process started: pid, process group, command, namespace

Every process is started in its own session (``setsid``), so stopping one stops what it
spawned (the SuperLink's and SuperNodes' SuperExec, ClientApp and ServerApp processes): SIGTERM
to the process group, then SIGKILL after a grace period. Only the process groups recorded in
``pids.json`` are ever signalled (and only while their leader still runs the recorded command).
Every wait has a deadline. A process may run in a network namespace (``netns``): the command is
prefixed with ``ip netns exec NS``, which execs it (same PID).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from coded_fl.secagg.identity import IDENTITY_KEY_SETTING, TRUSTED_KEYS_SETTING
from simulations.deploy import forkserver
from simulations.deploy.certs import make_credentials, make_node_key

__all__ = ["Deployment", "DeploymentError", "Proc", "free_port", "stop_recorded"]

REPO = Path(__file__).resolve().parents[2]
ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
}


def in_netns(netns: str | None) -> list[str]:
    """The command prefix that runs a command inside network namespace ``netns`` (or none)."""
    return [shutil.which("ip") or "/usr/sbin/ip", "netns", "exec", netns] if netns else []


class DeploymentError(RuntimeError):
    """A process did not start, did not become ready in time, or a command failed."""


@dataclass
class Proc:
    """One started process (the leader of its own process group)."""

    name: str
    pid: int
    cmd: list[str]
    log: str
    netns: str | None = None
    started: float = field(default_factory=time.time)

    def alive(self) -> bool:
        return _leader_matches(self.pid, self.cmd)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _leader_matches(pid: int, cmd: Sequence[str]) -> bool:
    """True while ``pid`` exists and still runs ``cmd`` (guards against PID reuse)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[1].split()[0] == "Z":  # a zombie has exited
        return False
    args = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    if not args:  # between fork and exec (or in exec): it is there and not a zombie
        return True
    names = {Path(cmd[0]).name}
    if Path(cmd[0]).name == "ip" and list(cmd[1:3]) == ["netns", "exec"]:
        names.add(Path(cmd[4]).name)  # `ip netns exec NS cmd` execs cmd (same pid)
    return bool(args) and any(Path(a).name in names for a in args[:2])


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(proc: Proc, *, grace: float = 15.0, sig: int = signal.SIGTERM) -> None:
    """Signal ``proc``'s process group (SIGTERM), wait up to ``grace`` s, then SIGKILL it."""
    pgid = proc.pid  # started with start_new_session: pgid == pid
    if not _leader_matches(proc.pid, proc.cmd) and not _group_alive(pgid):
        return
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return
    end = time.monotonic() + grace
    while time.monotonic() < end and _group_alive(pgid):
        _reap(proc.pid)
        time.sleep(0.1)
    if _group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        end = time.monotonic() + 5.0
        while time.monotonic() < end and _group_alive(pgid):
            _reap(proc.pid)
            time.sleep(0.05)
    _reap(proc.pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop_recorded(run_dir: str | os.PathLike[str], *, grace: float = 15.0) -> list[str]:
    """Stop every process recorded in ``run_dir/pids.json`` (newest first); returns names."""
    path = Path(run_dir) / "pids.json"
    if not path.exists():
        return []
    procs = [Proc(**p) for p in json.loads(path.read_text())]
    stopped = []
    for p in reversed(procs):
        if _leader_matches(p.pid, p.cmd) or _group_alive(p.pid):
            stop_group(p, grace=grace)
            stopped.append(p.name)
    path.write_text("[]\n")
    return stopped


@dataclass
class Deployment:
    """A SuperLink and its SuperNodes, started from ``run_dir`` (see the module docstring).

    Parameters
    ----------
    run_dir
        Directory for credentials, FLWR_HOME, logs and the PID record (created).
    tls
        Serve the SuperLink over TLS (a CA and server certificate are made in ``creds/``).
    auth
        Require SuperNode authentication (``--enable-supernode-auth``; needs ``tls``).
    hosts
        Addresses the SuperNodes and the ``flwr`` CLI use to reach the SuperLink: every one is
        a SAN of its certificate.
    python
        The interpreter whose ``bin`` directory holds ``flower-superlink`` & co.
    connection
        Name of the SuperLink connection written to ``FLWR_HOME/config.toml``.
    clientapp_forkserver
        Start the SuperNodes' ClientApp processes from a per-node fork server that has
        imported Flower, torch and coded-fl once (:mod:`simulations.deploy.forkserver`; test
        and CI time only). Default: ``CODED_FL_CLIENTAPP_FORKSERVER=1`` in the environment.
    """

    run_dir: Path
    tls: bool = True
    auth: bool = True
    hosts: Sequence[str] = ("127.0.0.1", "localhost")
    python: str = sys.executable
    connection: str = "codedfl-deploy"
    extra_env: Mapping[str, str] = field(default_factory=dict)
    clientapp_forkserver: bool = field(default_factory=forkserver.enabled)
    procs: dict[str, Proc] = field(default_factory=dict)
    superlink_address: str = ""
    superlink_port: int = 0
    _popen: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    _shims: str = field(default="", init=False, repr=False)  # the shim's folder, when on
    _sockets: str = field(default="", init=False, repr=False)  # the zygotes' sockets

    def __post_init__(self) -> None:
        if self.auth and not self.tls:
            raise ValueError("SuperNode authentication needs TLS (tls=True)")
        self.run_dir = Path(self.run_dir).resolve()
        for sub in ("creds", "home", "logs"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        self.bindir = str(Path(self.python).parent)
        if self.clientapp_forkserver:  # a short folder: a Unix socket path has 107 bytes
            self._sockets = tempfile.mkdtemp(prefix="cfl-fs-")
            self._shims = str(self.run_dir / "forkserver-bin")
            forkserver.write_shim(
                self._shims, python=self.python, real=f"{self.bindir}/flwr-clientapp"
            )
        if self.tls and not (self.creds / "ca.pem").exists():
            make_credentials(self.creds, hosts=list(self.hosts))

    # ------------------------------------------------------------------ paths and env
    @property
    def creds(self) -> Path:
        return self.run_dir / "creds"

    @property
    def home(self) -> Path:
        return self.run_dir / "home"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(ENV)
        env["PATH"] = f"{self.bindir}{os.pathsep}{env.get('PATH', '')}"
        if self._shims:
            env["PATH"] = f"{self._shims}{os.pathsep}{env['PATH']}"
            env[forkserver.ENV_SOCKET_DIR] = self._sockets
        env["FLWR_HOME"] = str(self.home)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        env.update(self.extra_env)
        return env

    def node_key(self, name: str) -> tuple[Path, Path]:
        """The auth key pair of SuperNode ``name`` (made on first use)."""
        priv = self.creds / "nodes" / name
        if not priv.exists():
            make_node_key(self.creds / "nodes", name)
        return priv, priv.with_name(f"{name}.pub")

    # ------------------------------------------------------------------ processes
    def _record(self) -> None:
        path = self.run_dir / "pids.json"
        known = []
        if path.exists():
            known = [p for p in json.loads(path.read_text()) if p["name"] not in self.procs]
        rows = known + [asdict(p) for p in self.procs.values()]
        path.write_text(json.dumps(rows, indent=1) + "\n")

    def spawn(
        self,
        name: str,
        cmd: Sequence[str],
        *,
        netns: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Proc:
        """Start ``cmd`` in its own session (optionally inside ``netns``), logging to a file;
        ``env`` adds to (and overrides) the deployment's environment for this process only."""
        if name in self.procs and self.alive(name):
            raise DeploymentError(f"{name} is already running (pid {self.procs[name].pid})")
        full = in_netns(netns) + list(cmd)
        log = self.run_dir / "logs" / f"{name}.log"
        with open(log, "ab") as out:
            out.write(f"\n=== {time.strftime('%H:%M:%S')} {shlex.join(full)}\n".encode())
            out.flush()
            p = subprocess.Popen(
                full,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self.env(), **(env or {})},
                cwd=self.run_dir,
                start_new_session=True,
            )
        proc = Proc(name=name, pid=p.pid, cmd=full, log=str(log), netns=netns)
        self.procs[name] = proc
        self._popen[name] = p
        self._record()
        return proc

    def wait_log(self, name: str, pattern: str, *, timeout: float, since: int = 0) -> str:
        """Wait until ``name``'s log matches ``pattern`` (after byte ``since``); the line."""
        proc = self.procs[name]
        rx = re.compile(pattern)
        end = time.monotonic() + timeout
        while True:
            text = Path(proc.log).read_bytes()[since:].decode(errors="replace")
            m = rx.search(text)
            if m:
                return m.group(0)
            if not self.alive(name):
                raise DeploymentError(f"{name} exited before /{pattern}/:\n{_tail(text)}")
            if time.monotonic() >= end:
                raise DeploymentError(
                    f"{name}: no /{pattern}/ within {timeout:.0f}s; end of its log:\n{_tail(text)}"
                )
            time.sleep(0.2)

    def alive(self, name: str) -> bool:
        """Whether ``name`` still runs (our own child: asked directly; else by its PID)."""
        p = self._popen.get(name)
        if p is not None:
            return p.poll() is None
        proc = self.procs.get(name)
        return proc is not None and proc.alive()

    def log_size(self, name: str) -> int:
        return Path(self.procs[name].log).stat().st_size

    def wait_exit(self, name: str, *, timeout: float) -> int | None:
        """Wait (bounded) for ``name`` to exit; its exit code, or None if it still runs."""
        p = self._popen.get(name)
        if p is None:
            return None
        try:
            return int(p.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            return None

    def stop(self, name: str, *, grace: float = 15.0) -> None:
        """SIGTERM ``name``'s process group (SIGKILL after ``grace`` s)."""
        proc = self.procs.get(name)
        if proc is not None:
            stop_group(proc, grace=grace)
            self._wait_popen(name)

    def kill(self, name: str) -> None:
        """SIGKILL ``name``'s whole process group at once (a crash)."""
        proc = self.procs.get(name)
        if proc is not None:
            stop_group(proc, grace=0.0, sig=signal.SIGKILL)
            self._wait_popen(name)

    def _wait_popen(self, name: str) -> None:
        p = self._popen.get(name)
        if p is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)

    def down(self, *, grace: float = 15.0) -> None:
        """Stop every process this deployment started, newest first."""
        for name in reversed(list(self.procs)):
            self.stop(name, grace=grace)
        stop_recorded(self.run_dir, grace=grace)
        if self._shims:
            shutil.rmtree(self._sockets, ignore_errors=True)

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ------------------------------------------------------------------ SuperLink
    def start_superlink(
        self,
        *,
        bind: str = "127.0.0.1",
        port: int | None = None,
        address: str | None = None,
        netns: str | None = None,
        timeout: float = 60.0,
        database: bool = False,
    ) -> Proc:
        """Start ``flower-superlink`` on ``bind:port``; ``address`` is how clients reach it.

        Its state (registered nodes, messages, objects) is kept in memory, Flower's default,
        unless ``database`` (then ``RUN_DIR/state.db``: it survives a SuperLink restart)."""
        port = port or free_port()
        cmd = [f"{self.bindir}/flower-superlink", "--host", bind, "--port", str(port)]
        if database:
            cmd += ["--database", str(self.run_dir / "state.db")]
        cmd += ["--disable-runtime-dependency-installation"]
        if self.tls:
            cmd += [
                "--ssl-ca-certfile",
                str(self.creds / "ca.pem"),
                "--ssl-certfile",
                str(self.creds / "server.pem"),
                "--ssl-keyfile",
                str(self.creds / "server.key"),
            ]
        else:
            cmd += ["--insecure"]
        if self.auth:
            cmd += ["--enable-supernode-auth"]
        proc = self.spawn("superlink", cmd, netns=netns)
        self.wait_log("superlink", r"Uvicorn running on", timeout=timeout)
        self.superlink_address = address or f"{self.hosts[0]}:{port}"
        self.superlink_port = port
        self.write_connection()
        return proc

    def write_connection(self, address: str | None = None) -> Path:
        """``FLWR_HOME/config.toml`` with this deployment's connection (the default)."""
        addr = address or self.superlink_address
        lines = [
            "[superlink]",
            f'default = "{self.connection}"',
            "",
            f"[superlink.{self.connection}]",
            f'address = "{addr}"',
        ]
        if self.tls:
            lines.append(f'root-certificates = "{self.creds / "ca.pem"}"')
        else:
            lines.append("insecure = true")
        path = self.home / "config.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def flwr(
        self, args: Sequence[str], *, timeout: float = 60.0, netns: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the ``flwr`` CLI (bounded); raises :class:`DeploymentError` if it fails."""
        cmd = [*in_netns(netns), f"{self.bindir}/flwr", *args]
        try:
            res = subprocess.run(
                cmd,
                env=self.env(),
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise DeploymentError(f"`flwr {shlex.join(args)}` took more than {timeout}s") from exc
        if res.returncode != 0:
            raise DeploymentError(
                f"`flwr {shlex.join(args)}` failed ({res.returncode}):\n"
                f"{_tail(res.stdout + res.stderr)}"
            )
        return res

    def register(self, name: str, *, netns: str | None = None) -> int:
        """Register SuperNode ``name``'s public key with the SuperLink; its node id."""
        _, pub = self.node_key(name)
        res = self.flwr(
            [
                "supernode",
                "register",
                str(pub),
                self.connection,
                "--name",
                name,
                "--format",
                "json",
            ],
            netns=netns,
        )
        m = re.search(r'"node[-_]id"\s*:\s*"?(\d+)', res.stdout) or re.search(
            r"(\d{3,})", res.stdout
        )
        if not m:
            raise DeploymentError(f"cannot read the node id from: {res.stdout!r}")
        trusted = self.creds / "registered"  # the nodes' trust roster (codedfl.trusted-keys)
        trusted.mkdir(exist_ok=True)
        shutil.copyfile(pub, trusted / pub.name)
        return int(m.group(1))

    def nodes(self, *, netns: str | None = None) -> list[dict[str, object]]:
        """``flwr supernode ls`` as a list of dicts (node_id, status, ...)."""
        res = self.flwr(["supernode", "ls", self.connection, "--format", "json"], netns=netns)
        data = json.loads(res.stdout[res.stdout.index("{") :])
        return list(data.get("nodes", []))

    # ------------------------------------------------------------------ SuperNodes
    def start_supernode(
        self,
        name: str,
        node_config: Mapping[str, object],
        *,
        superlink: str | None = None,
        netns: str | None = None,
        tls: bool | None = None,
        key: bool | None = None,
        root_certificates: str | None = None,
        extra: Sequence[str] = (),
        wait: bool = True,
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> Proc:
        """Start ``flower-supernode`` ``name`` with its node config.

        ``tls``/``key`` default to the deployment's settings; pass False to start a node
        without TLS or without an authentication key (the refusal tests do). ``env`` is this
        node's own environment on top of the deployment's (e.g. ``ATEN_CPU_CAPABILITY``,
        ``OMP_NUM_THREADS``: a site whose CPU kernels differ, for the heterogeneity bed).
        A node with an authentication key also signs its key-agreement keys with it and trusts
        the public keys of the nodes :meth:`register` registered (node config
        ``codedfl.identity-key`` and ``codedfl.trusted-keys``, unless ``node_config`` sets
        them).
        """
        tls = self.tls if tls is None else tls
        key = self.auth if key is None else key
        if key:  # authenticated key agreement: the node's auth key signs, the registered trust
            node_config = {
                IDENTITY_KEY_SETTING: str(self.node_key(name)[0]),
                TRUSTED_KEYS_SETTING: str(self.creds / "registered"),
                **node_config,
            }
        port = free_port()
        cfg = " ".join(f"{k}={_toml(v)}" for k, v in node_config.items())
        cmd = [
            f"{self.bindir}/flower-supernode",
            "--superlink",
            superlink or self.superlink_address,
        ]
        cmd += ["--port", str(port), "--node-config", cfg]
        if tls:
            cmd += ["--root-certificates", root_certificates or str(self.creds / "ca.pem")]
        else:
            cmd += ["--insecure"]
        if key:
            cmd += ["--auth-supernode-private-key", str(self.node_key(name)[0])]
        cmd += list(extra)
        since = self.log_size(name) if name in self.procs else 0
        proc = self.spawn(name, cmd, netns=netns, env=env)
        if wait:
            self.wait_log(name, r"SuperNode ID: \d+", timeout=timeout, since=since)
        return proc

    # ------------------------------------------------------------------ runs
    def run_app(
        self,
        app_dir: str | os.PathLike[str],
        run_config: Mapping[str, object],
        *,
        timeout: float,
        netns: str | None = None,
        log_name: str = "run",
    ) -> str:
        """``flwr run APP CONNECTION --stream -c ...``, bounded by ``timeout`` seconds.

        Returns the output. On timeout the run is stopped (``flwr stop``) and
        :class:`DeploymentError` raised.
        """
        overrides = " ".join(f"{k}={_toml(v)}" for k, v in run_config.items())
        args = ["run", str(Path(app_dir).resolve()), self.connection, "--stream"]
        if overrides:
            args += ["-c", overrides]
        proc = self.spawn(log_name, [f"{self.bindir}/flwr", *args], netns=netns)
        p = self._popen[log_name]
        log = Path(proc.log)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            text = log.read_text(errors="replace")
            m = re.search(r"started run (\d+)", text)
            if m:
                with contextlib.suppress(DeploymentError):
                    self.flwr(["stop", m.group(1), self.connection], netns=netns, timeout=30)
            stop_group(proc, grace=5.0)
            raise DeploymentError(
                f"`flwr run` did not finish within {timeout:.0f}s; end of its output:\n"
                f"{_tail(text)}"
            ) from None
        finally:
            self.procs.pop(log_name, None)
            self._record()
        text = log.read_text(errors="replace")
        if p.returncode != 0:
            raise DeploymentError(f"`flwr run` failed ({p.returncode}):\n{_tail(text)}")
        return text


def _toml(v: object) -> str:
    """A value as it is written in ``--node-config`` / ``-c`` (strings quoted)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.splitlines()[-lines:])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m simulations.deploy.launcher down RUN_DIR``: stop what a run left behind."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m simulations.deploy.launcher")
    sub = parser.add_subparsers(dest="cmd", required=True)
    down = sub.add_parser("down", help="stop every process recorded in RUN_DIR/pids.json")
    down.add_argument("run_dir")
    args = parser.parse_args(argv)
    stopped = stop_recorded(args.run_dir)
    print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
