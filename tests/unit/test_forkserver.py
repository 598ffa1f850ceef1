"""The deployment bed's ClientApp fork server (simulations/deploy/forkserver.py).

A shim stands for ``flwr-clientapp``; a per-node zygote forks the child that runs the entry
point. What the bed relies on: the child gets the caller's arguments, environment, working
directory and standard streams, its exit status comes back, torch in the child was imported
under the node's own ``ATEN_CPU_CAPABILITY``, the shim falls back to the stock executable when
there is no fork server, and the zygote leaves when its SuperExec is gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulations.deploy import forkserver

REPO = Path(__file__).resolve().parents[2]
PROBE = "tests.unit.test_forkserver:probe"
SERVE = (sys.executable, "-m", "simulations.deploy.forkserver", "serve")


def probe() -> None:
    """A child's entry in these tests: report what the child sees, exit with argv[1]."""
    import torch

    print(
        json.dumps(
            {
                "argv": sys.argv[1:],
                "cwd": os.getcwd(),
                "marker": os.environ.get("FORKSERVER_TEST_MARKER"),
                "capability": torch.backends.cpu.get_cpu_capability(),
                "pid": os.getpid(),
            }
        ),
        flush=True,
    )
    print("probe stderr", file=sys.stderr, flush=True)
    sys.exit(int(sys.argv[1]))


def _env(sockets: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env[forkserver.ENV_SOCKET_DIR] = str(sockets)
    env.update(extra)
    return env


def _zygote(sockets: Path, env: dict[str, str], *, entry: str) -> subprocess.Popen[bytes]:
    """This test process as the owner (the SuperExec) of a zygote the shim will find."""
    sock = sockets / f"{os.getpid()}.sock"
    proc = subprocess.Popen(
        [*SERVE, "--socket", str(sock), "--owner", str(os.getpid()), "--entry", entry],
        env=env,
    )
    deadline = time.monotonic() + 60
    while not sock.exists():
        assert proc.poll() is None, "the zygote exited at start"
        assert time.monotonic() < deadline, "the zygote did not listen within 60 s"
        time.sleep(0.05)
    return proc


@pytest.fixture
def shim(tmp_path: Path) -> Path:
    stock = tmp_path / "stock-clientapp"
    stock.write_text('#!/bin/sh\necho stock "$@"\nexit 3\n')
    stock.chmod(0o755)
    return forkserver.write_shim(tmp_path / "bin", python=sys.executable, real=str(stock))


def test_the_child_gets_the_callers_arguments_env_cwd_streams_and_returns_its_status(
    tmp_path: Path, shim: Path
) -> None:
    sockets = tmp_path / "s"
    sockets.mkdir()
    env = _env(sockets, ATEN_CPU_CAPABILITY="default")
    zygote = _zygote(sockets, env, entry=PROBE)
    try:
        work = tmp_path / "work"
        work.mkdir()
        seen = []
        for code in (0, 7):
            done = subprocess.run(
                [str(shim), str(code), "--token", "x"],
                env={**env, "FORKSERVER_TEST_MARKER": f"m{code}"},
                cwd=work,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == code, done.stderr
            assert done.stderr.strip() == "probe stderr"
            seen.append(json.loads(done.stdout))
        for code, got in zip((0, 7), seen, strict=True):
            assert got["argv"] == [str(code), "--token", "x"]
            assert got["cwd"] == str(work)
            assert got["marker"] == f"m{code}"
            # torch was imported once, in the zygote, under the node's own setting
            assert got["capability"] == "DEFAULT"
        assert seen[0]["pid"] != seen[1]["pid"] != zygote.pid  # a process per message
    finally:
        zygote.terminate()
        zygote.wait(timeout=30)


def test_flowers_own_entry_point_runs_in_the_child(tmp_path: Path, shim: Path) -> None:
    sockets = tmp_path / "s"
    sockets.mkdir()
    env = _env(sockets)
    zygote = _zygote(sockets, env, entry=forkserver.ENTRY)
    try:
        ok = subprocess.run([str(shim), "--help"], env=env, capture_output=True, text=True)
        assert ok.returncode == 0 and ok.stdout.startswith("usage: flwr-clientapp"), ok
        bad = subprocess.run([str(shim), "--nonsense"], env=env, capture_output=True, text=True)
        assert bad.returncode == 2 and "--token" in bad.stderr, bad
    finally:
        zygote.terminate()
        zygote.wait(timeout=30)


def test_a_malformed_request_is_refused_and_the_zygote_serves_on(
    tmp_path: Path, shim: Path
) -> None:
    import socket

    sockets = tmp_path / "s"
    sockets.mkdir()
    env = _env(sockets)
    zygote = _zygote(sockets, env, entry=PROBE)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bad:
            bad.connect(str(sockets / f"{os.getpid()}.sock"))
            bad.sendall(b"\x00\x00\x00\x02{}")  # no standard streams
            assert bad.recv(100) == b""  # closed without a child
        done = subprocess.run([str(shim), "5"], env=env, capture_output=True, text=True)
        assert done.returncode == 5, done.stderr
    finally:
        zygote.terminate()
        zygote.wait(timeout=30)


def test_without_a_fork_server_the_shim_runs_the_stock_executable(
    tmp_path: Path, shim: Path
) -> None:
    env = dict(os.environ)
    env.pop(forkserver.ENV_SOCKET_DIR, None)
    done = subprocess.run([str(shim), "--token", "y"], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip()) == (3, "stock --token y")


def test_the_zygote_leaves_when_its_owner_is_gone(tmp_path: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    sock = tmp_path / "z.sock"
    zygote = subprocess.Popen(
        [*SERVE, "--socket", str(sock), "--owner", str(owner.pid)],
        env=_env(tmp_path),
    )
    try:
        deadline = time.monotonic() + 60
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sock.exists() and zygote.poll() is None
        owner.kill()
        owner.wait()
        assert zygote.wait(timeout=30) == 0
        assert not sock.exists()
    finally:
        owner.kill()
        zygote.kill()


def test_the_switch_reads_the_environment() -> None:
    assert forkserver.enabled({forkserver.ENV_FLAG: "1"})
    assert not forkserver.enabled({forkserver.ENV_FLAG: "0"})
    assert not forkserver.enabled({})
