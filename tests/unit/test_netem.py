"""The delaying TCP proxy of the deployment test bed: latency, order, loss, live parameters."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

import pytest

from simulations.deploy.netem import LinkParams, serve


async def _echo_server() -> tuple[asyncio.base_events.Server, int]:
    async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
        w.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _with_proxy(params: LinkParams, body, params_file: str | None = None):  # type: ignore[no-untyped-def]
    server, port = await _echo_server()
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "ready"
        task = asyncio.ensure_future(
            serve(
                ("127.0.0.1", 0),
                ("127.0.0.1", port),
                params,
                params_file=params_file,
                seed=1,
                ready_file=str(ready),
            )
        )
        try:
            for _ in range(200):
                if ready.exists():
                    break
                await asyncio.sleep(0.02)
            proxy_port = int(ready.read_text().rsplit(":", 1)[1])
            r, w = await asyncio.open_connection("127.0.0.1", proxy_port)
            return await asyncio.wait_for(body(r, w), timeout=20)
        finally:
            task.cancel()
            server.close()


async def _rtt(r: asyncio.StreamReader, w: asyncio.StreamWriter, payload: bytes) -> float:
    t0 = time.monotonic()
    w.write(payload)
    await w.drain()
    got = b""
    while len(got) < len(payload):
        got += await r.read(65536)
    assert got == payload
    return time.monotonic() - t0


def test_round_trip_takes_twice_the_latency() -> None:
    async def body(r, w):  # type: ignore[no-untyped-def]
        return [await _rtt(r, w, b"x" * 100) for _ in range(3)]

    rtts = asyncio.run(_with_proxy(LinkParams(latency=0.1), body))
    assert all(0.19 <= t < 0.6 for t in rtts), rtts


def test_jitter_keeps_the_byte_order() -> None:
    payload = bytes(range(256)) * 2000  # 512 kB in many chunks, each delayed differently

    async def body(r, w):  # type: ignore[no-untyped-def]
        return await _rtt(r, w, payload)

    asyncio.run(_with_proxy(LinkParams(latency=0.02, jitter=0.02), body))


def test_loss_costs_a_retransmission_delay() -> None:
    async def body(r, w):  # type: ignore[no-untyped-def]
        return await _rtt(r, w, b"y")

    t = asyncio.run(_with_proxy(LinkParams(latency=0.0, loss=1.0, rto=0.15), body))
    assert 0.29 <= t < 1.0


def test_parameters_are_reloaded_while_running(tmp_path: Path) -> None:
    f = tmp_path / "link.json"
    f.write_text(json.dumps({"latency": 0.0}))

    async def body(r, w):  # type: ignore[no-untyped-def]
        fast = await _rtt(r, w, b"z")
        f.write_text(json.dumps({"latency": 0.15}))
        await asyncio.sleep(0.8)  # re-read every 0.5 s
        slow = await _rtt(r, w, b"z")
        return fast, slow

    fast, slow = asyncio.run(_with_proxy(LinkParams(), body, params_file=str(f)))
    assert fast < 0.15 and slow >= 0.29


@pytest.mark.parametrize(
    "bad", [{"latency": -1.0}, {"loss": 1.5}, {"latency": 0.01, "jitter": 0.02}]
)
def test_invalid_parameters_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        LinkParams(**bad).validate()
