"""A multi-site test bed on one machine: one network namespace per site.

::

    with TestBed(sites=[Site(), Site(), Site(latency=0.2)]) as bed:
        bed.up()                      # SuperLink (TLS + node auth) and one SuperNode per site
        bed.run(app_dir, {...}, timeout=600)
        bed.set_link(2, latency=0.02) # change a site's link while it runs
        bed.dep.kill("site0")         # faults

Layout (``T`` is a random tag, so parallel beds never collide)::

    cfl-T-hub    a bridge ``br0``; one veth end per member (no address: a switch)
    cfl-T-link   10.R.S.1/24: the SuperLink, the ServerApp, the ``flwr`` CLI
    cfl-T-sK     10.R.S.(K+2)/24: site K: the delaying proxy (netem) and the SuperNode

Nothing is added to the host's own network namespace: veth pairs are created directly
inside the namespaces and the addresses (a random private /24) exist only there. Traffic goes
SuperNode -> 127.0.0.1:P (the site's proxy, in the site's namespace: latency, jitter, loss) ->
10.R.S.1 over the bridge (``tbf`` rate limit on the site's veth if ``rate`` is set) -> SuperLink.
The SuperLink's certificate has SANs for 127.0.0.1 and the SuperLink's bed address.

``TestBed(..., namespaces=False)`` runs the same on the host's loopback (no root needed): the
SuperLink and the proxies on free 127.0.0.1 ports, the rate limit in the proxy instead of tbf.

Everything is torn down in :meth:`TestBed.close` (also on exceptions and at interpreter exit):
processes by process group (recorded PIDs only), then ``ip netns del`` of each namespace it
created, which also removes their interfaces. :func:`namespaces_available` says whether this
machine lets us create namespaces (root, ``ip`` present); callers skip cleanly otherwise.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from simulations.deploy.launcher import (
    Deployment,
    DeploymentError,
    Proc,
    free_port,
    stop_group,
)

__all__ = ["Site", "TestBed", "namespaces_available"]

PREFIX = "cfl"
IP = shutil.which("ip") or "/usr/sbin/ip"
TC = shutil.which("tc") or "/usr/sbin/tc"


@dataclass
class Site:
    """One site's link to the SuperLink (seconds, probabilities, bytes/s)."""

    latency: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0
    reset: float = 0.0
    rate: float = 0.0  # tbf on the site's veth (kernel), 0: unlimited
    node_config: dict[str, object] = field(default_factory=dict)
    #: the site's SuperNode environment on top of the bed's, e.g. {"ATEN_CPU_CAPABILITY":
    #: "avx2", "OMP_NUM_THREADS": "2"}: a site whose replicas differ (issue 12)
    env: dict[str, str] = field(default_factory=dict)


def _ip(*args: str, check: bool = True, timeout: float = 20.0) -> subprocess.CompletedProcess:
    return subprocess.run([IP, *args], capture_output=True, text=True, timeout=timeout, check=check)


def namespaces_available() -> tuple[bool, str]:
    """(True, "") if network namespaces, veth pairs and bridges can be made here; else why not."""
    if sys.platform != "linux":
        return False, "network namespaces need Linux"
    if shutil.which("ip") is None:
        return False, "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return False, "creating network namespaces needs root (run the test bed as root)"
    probe = f"{PREFIX}-probe-{secrets.token_hex(3)}"
    try:
        res = _ip("netns", "add", probe, check=False)
        if res.returncode != 0:
            return False, f"`ip netns add` failed: {res.stderr.strip()}"
        res = _ip("-n", probe, "link", "add", "name", "br0", "type", "bridge", check=False)
        if res.returncode != 0:
            return False, f"cannot create a bridge in a namespace: {res.stderr.strip()}"
        res = _ip(
            "-n",
            probe,
            "link",
            "add",
            "name",
            "va",
            "type",
            "veth",
            "peer",
            "name",
            "vb",
            check=False,
        )
        if res.returncode != 0:
            return False, f"cannot create a veth pair: {res.stderr.strip()}"
        return True, ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"`ip netns` is unusable: {exc}"
    finally:
        _ip("netns", "del", probe, check=False)


def _raise_on_sigterm() -> signal.Handlers | None:
    """Make SIGTERM raise SystemExit (so ``finally``/atexit tear the bed down) if it would
    otherwise kill the interpreter outright; returns the handler to restore."""
    if threading.current_thread() is not threading.main_thread():
        return None
    old = signal.getsignal(signal.SIGTERM)
    if old != signal.SIG_DFL:
        return None

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    return old  # type: ignore[return-value]


class TestBed:
    """Sites in network namespaces around one SuperLink (see the module docstring)."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        sites: Sequence[Site],
        *,
        run_dir: str | os.PathLike[str] | None = None,
        tls: bool = True,
        auth: bool = True,
        python: str = sys.executable,
        seed: int | None = None,
        namespaces: bool = True,
    ) -> None:
        if namespaces:
            ok, why = namespaces_available()
            if not ok:
                raise DeploymentError(f"no test bed: {why}")
        self.use_ns = namespaces
        self.tag = secrets.token_hex(3)
        self.sites = list(sites)
        self.seed = seed
        self._own_dir = run_dir is None
        self.run_dir = Path(run_dir or tempfile.mkdtemp(prefix=f"cfl-bed-{self.tag}-"))
        self.subnet = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(256)}"
        self.link_ip = f"{self.subnet}.1" if namespaces else "127.0.0.1"
        self.namespaces: list[str] = []
        self.proxies: dict[int, Proc] = {}
        self.proxy_ports: dict[int, int] = {}
        self._closed = False
        atexit.register(self.close)
        self._sigterm = _raise_on_sigterm()
        try:
            if namespaces:
                self._make_network()
            self.dep = Deployment(
                self.run_dir,
                tls=tls,
                auth=auth,
                hosts=("127.0.0.1", self.link_ip),
                python=python,
            )
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ names
    @property
    def hub(self) -> str:
        return f"{PREFIX}-{self.tag}-hub"

    @property
    def link_ns(self) -> str | None:
        return f"{PREFIX}-{self.tag}-link" if self.use_ns else None

    def site_ns(self, k: int) -> str | None:
        return f"{PREFIX}-{self.tag}-s{k}" if self.use_ns else None

    def site_ip(self, k: int) -> str:
        return f"{self.subnet}.{k + 2}"

    # ------------------------------------------------------------------ network
    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _make_network(self) -> None:
        self._add_ns(self.hub)
        _ip("-n", self.hub, "link", "add", "name", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        members = [(str(self.link_ns), self.link_ip, 0.0)] + [
            (str(self.site_ns(k)), self.site_ip(k), s.rate) for k, s in enumerate(self.sites)
        ]
        for idx, (ns, ip, rate) in enumerate(members):
            self._add_ns(ns)
            port = f"p{idx}"
            # both ends are created inside the namespaces: nothing touches the host's netns
            veth = ["type", "veth", "peer", "name", "eth0", "netns", ns]
            _ip("-n", self.hub, "link", "add", "name", port, *veth)
            _ip("-n", self.hub, "link", "set", port, "master", "br0")
            _ip("-n", self.hub, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            if rate > 0:
                self._shape(ns, "eth0", rate)  # the site's upload
                self._shape(self.hub, port, rate)  # the site's download

    def _shape(self, ns: str, dev: str, rate: float) -> None:
        """``tbf`` rate limit (bytes/s) on ``dev`` in ``ns`` (egress)."""
        bits = int(rate * 8)
        burst = max(32 * 1024, int(rate / 100))
        tbf = ["root", "tbf", "rate", f"{bits}bit", "burst", str(burst), "latency", "400ms"]
        subprocess.run(
            [IP, "netns", "exec", ns, TC, "qdisc", "add", "dev", dev, *tbf],
            check=True,
            capture_output=True,
            timeout=20,
        )

    # ------------------------------------------------------------------ processes
    def _params_file(self, k: int) -> Path:
        return self.run_dir / f"link-site{k}.json"

    def set_link(self, k: int, **params: float) -> None:
        """Change site ``k``'s proxy parameters (latency, jitter, loss, rto, reset, rate)."""
        path = self._params_file(k)
        cur = json.loads(path.read_text()) if path.exists() else {}
        cur.update(params)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cur))
        os.replace(tmp, path)

    def start_proxy(self, k: int, superlink_port: int) -> int:
        s = self.sites[k]
        # in the site's own namespace nothing else listens; on loopback the OS picks a port
        port = 18000 + k if self.use_ns else free_port()
        link = {"latency": s.latency, "jitter": s.jitter, "loss": s.loss, "reset": s.reset}
        if not self.use_ns:
            link["rate"] = s.rate  # no veth to shape with tbf: the proxy limits the rate
        self.set_link(k, **link)
        ready = self.run_dir / f"proxy-site{k}.ready"
        ready.unlink(missing_ok=True)
        cmd = [self.dep.python, "-m", "simulations.deploy.netem", "--listen",
               f"127.0.0.1:{port}", "--target", f"{self.link_ip}:{superlink_port}",
               "--params", str(self._params_file(k)), "--ready-file", str(ready)]  # fmt: skip
        if self.seed is not None:
            cmd += ["--seed", str(self.seed + k)]
        self.proxies[k] = self.dep.spawn(f"proxy{k}", cmd, netns=self.site_ns(k))
        end = time.monotonic() + 30
        while not ready.exists():
            if time.monotonic() > end or not self.dep.alive(f"proxy{k}"):
                raise DeploymentError(f"the proxy of site {k} did not start")
            time.sleep(0.1)
        self.proxy_ports[k] = port
        return port

    def up(
        self,
        *,
        node_config: Mapping[str, object] | None = None,
        register: bool = True,
        timeout: float = 90.0,
    ) -> None:
        """Start the SuperLink, one proxy and one (registered) SuperNode per site."""
        port = 9443 if self.use_ns else free_port()
        self.dep.start_superlink(
            # all interfaces of the bed's own namespace (its loopback and its bed address)
            bind="0.0.0.0" if self.use_ns else "127.0.0.1",  # noqa: S104
            port=port,
            address=f"127.0.0.1:{port}",
            netns=self.link_ns,
            timeout=timeout,
        )
        n = len(self.sites)
        for k in range(n):
            self.start_proxy(k, port)
        if register and self.dep.auth:  # one `flwr supernode register` per site, in parallel
            with ThreadPoolExecutor(max_workers=min(n, 6)) as pool:
                for fut in [
                    pool.submit(self.dep.register, f"site{k}", netns=self.link_ns) for k in range(n)
                ]:
                    fut.result()
        for k in range(n):
            self.start_node(k, node_config=node_config, wait=False)
        for k in range(n):
            self.dep.wait_log(f"site{k}", r"SuperNode ID: \d+", timeout=timeout)

    def node_config(self, k: int, extra: Mapping[str, object] | None = None) -> dict:
        n = len(self.sites)
        cfg: dict[str, object] = {"site": k, "partition-id": k, "num-partitions": n}
        cfg.update(self.sites[k].node_config)
        cfg.update(extra or {})
        return cfg

    def start_node(
        self,
        k: int,
        *,
        name: str | None = None,
        node_config: Mapping[str, object] | None = None,
        wait: bool = True,
        timeout: float = 90.0,
        **kwargs: object,
    ) -> Proc:
        """Start site ``k``'s SuperNode (through its proxy); ``kwargs`` go to
        :meth:`Deployment.start_supernode` (tls=False, key=False, extra=... for the refusals)."""
        kwargs.setdefault("env", self.sites[k].env)
        return self.dep.start_supernode(
            name or f"site{k}",
            self.node_config(k, node_config),
            superlink=f"127.0.0.1:{self.proxy_ports[k]}",
            netns=self.site_ns(k),
            wait=wait,
            timeout=timeout,
            **kwargs,  # type: ignore[arg-type]
        )

    def run(self, app_dir: str | os.PathLike[str], run_config: Mapping[str, object], **kw):  # type: ignore[no-untyped-def]
        """``flwr run`` from the SuperLink's namespace (see :meth:`Deployment.run_app`)."""
        return self.dep.run_app(app_dir, run_config, netns=self.link_ns, **kw)

    def flwr(self, args: Sequence[str], **kw):  # type: ignore[no-untyped-def]
        return self.dep.flwr(args, netns=self.link_ns, **kw)

    def nodes(self) -> list[dict[str, object]]:
        return self.dep.nodes(netns=self.link_ns)

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        """Stop every process, delete every namespace; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        dep = getattr(self, "dep", None)
        try:
            if dep is not None:
                dep.down(grace=10.0)
            for proc in self.proxies.values():
                stop_group(proc, grace=2.0)
        finally:
            for ns in reversed(self.namespaces):
                _ip("netns", "del", ns, check=False)
            self.namespaces.clear()
            atexit.unregister(self.close)
            if self._sigterm is not None:
                with contextlib.suppress(ValueError):  # not the main thread any more
                    signal.signal(signal.SIGTERM, self._sigterm)

    def describe(self) -> dict[str, object]:
        return {
            "network": "namespaces" if self.use_ns else "loopback",
            "namespaces": len(self.namespaces),
            "subnet": f"{self.subnet}.0/24" if self.use_ns else "127.0.0.1",
            "sites": [asdict(s) for s in self.sites],
        }

    def __enter__(self) -> TestBed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
