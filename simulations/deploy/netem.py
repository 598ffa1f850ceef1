"""A delaying TCP proxy: per-site latency, jitter and loss for a Flower deployment.

This kernel has no ``netem`` qdisc, so a site's wide-area link is emulated in user space: the
SuperNode of a site connects to the proxy, the proxy to the SuperLink. Every chunk read from
either side is delivered after ``latency +- jitter`` seconds (one way; in order per direction,
so a later chunk never overtakes an earlier one). ``loss`` is the probability that a chunk is
"lost" and retransmitted: over TCP a lost segment costs a retransmission timeout, so it is
delivered ``rto`` seconds later than it would have been. ``reset`` is the probability, per
connection, that the connection is cut at a random point (what a flaky link does to a TCP
stream). ``rate`` (bytes/s, optional) caps each direction's throughput; in the namespace test
bed ``tbf`` on the veth does that in the kernel instead.

The parameters can be changed while it runs: it re-reads ``--params FILE`` (JSON with any of
latency, jitter, loss, rto, reset, rate) every half second, so a test can make a site slow.

Run: ``python -m simulations.deploy.netem --listen 127.0.0.1:9000 --target 10.0.0.1:8000
--latency 0.02 --jitter 0.005``. Every wait is bounded: connects time out after 10 s, idle
connections are closed after ``--idle`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["LinkParams", "main", "serve"]

CHUNK = 64 * 1024


@dataclass
class LinkParams:
    """One direction's (and both directions') link emulation, in seconds and bytes/s."""

    latency: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0
    rto: float = 0.2
    reset: float = 0.0
    rate: float = 0.0  # 0: unlimited

    def validate(self) -> LinkParams:
        for name in ("latency", "jitter", "rto", "rate"):
            v = getattr(self, name)
            if not (v >= 0 and v < 1e9):
                raise ValueError(f"{name} must be >= 0, got {v!r}")
        for name in ("loss", "reset"):
            v = getattr(self, name)
            if not 0 <= v <= 1:
                raise ValueError(f"{name} must be a probability in [0, 1], got {v!r}")
        if self.jitter > self.latency:
            raise ValueError("jitter must not exceed latency (delays cannot be negative)")
        return self

    def delay(self, rng: random.Random) -> float:
        d = self.latency + (rng.uniform(-self.jitter, self.jitter) if self.jitter else 0.0)
        if self.loss and rng.random() < self.loss:
            d += self.rto
        return max(0.0, d)


class _Link:
    """Shared, reloadable parameters."""

    def __init__(self, params: LinkParams, path: str | None) -> None:
        self.params = params.validate()
        self.path = Path(path) if path else None
        self._mtime = 0.0

    def reload(self) -> None:
        if self.path is None or not self.path.exists():
            return
        mtime = self.path.stat().st_mtime
        if mtime == self._mtime:
            return
        try:
            data = json.loads(self.path.read_text())
            self.params = LinkParams(**{**asdict(self.params), **data}).validate()
            self._mtime = mtime
        except (ValueError, TypeError, OSError):
            pass  # keep the last good parameters; the file is being written


async def _pump(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    link: _Link,
    rng: random.Random,
    cut_after: float | None,
    idle: float,
) -> None:
    """Copy reader -> writer, delivering each chunk after its delay, in order."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
    sent = 0

    async def deliver() -> None:
        next_free = 0.0  # rate limiting: when the link is free again
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            rate = link.params.rate
            if rate > 0:
                now = time.monotonic()
                start = max(now, next_free)
                next_free = start + len(data) / rate
                if next_free - now > 0:
                    await asyncio.sleep(next_free - now)
            writer.write(data)
            await asyncio.wait_for(writer.drain(), timeout=idle)

    task = asyncio.ensure_future(deliver())
    last_due = 0.0
    try:
        while True:
            data = await asyncio.wait_for(reader.read(CHUNK), timeout=idle)
            if not data:
                break
            sent += len(data)
            due = max(last_due, time.monotonic() + link.params.delay(rng))
            last_due = due
            queue.put_nowait((due, data))
            if cut_after is not None and sent >= cut_after:
                raise ConnectionResetError("emulated connection reset")
    finally:
        queue.put_nowait((0.0, b""))
        try:
            await asyncio.wait_for(task, timeout=max(1.0, last_due - time.monotonic() + 5.0))
        except (asyncio.TimeoutError, ConnectionError, OSError):
            task.cancel()
        with contextlib.suppress(OSError):
            writer.close()


async def _handle(
    client_r: asyncio.StreamReader,
    client_w: asyncio.StreamWriter,
    target: tuple[str, int],
    link: _Link,
    rng: random.Random,
    idle: float,
) -> None:
    try:
        up_r, up_w = await asyncio.wait_for(asyncio.open_connection(*target), timeout=10.0)
    except (OSError, asyncio.TimeoutError):
        client_w.close()
        return
    p = link.params
    cut = rng.uniform(0, 4 * CHUNK) if p.reset and rng.random() < p.reset else None
    await asyncio.gather(
        _pump(client_r, up_w, link, rng, cut, idle),
        _pump(up_r, client_w, link, rng, None, idle),
        return_exceptions=True,
    )


async def serve(
    listen: tuple[str, int],
    target: tuple[str, int],
    params: LinkParams,
    *,
    params_file: str | None = None,
    seed: int | None = None,
    idle: float = 600.0,
    ready_file: str | None = None,
) -> None:
    """Run the proxy until cancelled (SIGTERM/SIGINT when run as a program)."""
    link = _Link(params, params_file)
    rng = random.Random(seed)  # emulation noise only, never used for anything secret
    server = await asyncio.start_server(
        lambda r, w: _handle(r, w, target, link, rng, idle), listen[0], listen[1]
    )
    if ready_file:
        Path(ready_file).write_text(f"{listen[0]}:{server.sockets[0].getsockname()[1]}\n")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)
    async with server:
        while not stop.is_set():
            link.reload()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=0.5)


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.deploy.netem", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--listen", type=_addr, required=True, help="HOST:PORT to accept on")
    parser.add_argument("--target", type=_addr, required=True, help="HOST:PORT to forward to")
    parser.add_argument("--latency", type=float, default=0.0, help="one-way delay (s)")
    parser.add_argument("--jitter", type=float, default=0.0, help="+- uniform jitter (s)")
    parser.add_argument("--loss", type=float, default=0.0, help="chunk loss probability")
    parser.add_argument("--rto", type=float, default=0.2, help="retransmission delay (s)")
    parser.add_argument("--reset", type=float, default=0.0, help="connection cut probability")
    parser.add_argument("--rate", type=float, default=0.0, help="bytes/s per direction")
    parser.add_argument("--params", help="JSON file re-read every 0.5 s (overrides the flags)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the emulation noise")
    parser.add_argument("--idle", type=float, default=600.0, help="idle connection timeout (s)")
    parser.add_argument("--ready-file", help="write HOST:PORT here once listening")
    args = parser.parse_args(argv)
    params = LinkParams(args.latency, args.jitter, args.loss, args.rto, args.reset, args.rate)
    asyncio.run(
        serve(
            args.listen,
            args.target,
            params,
            params_file=args.params,
            seed=args.seed,
            idle=args.idle,
            ready_file=args.ready_file,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
