"""Fault injection for the demo: slow sites and a site that drops (a mod placed before
``coded_secagg_mod``, so it sees the node's own ``partition-id``, i.e. the site)."""

from __future__ import annotations

import time

from flwr.app import Context, Error, Message, MessageType

__all__ = ["fault_injection_mod", "parse_delays", "parse_sites"]


def parse_delays(text: str) -> dict[int, float]:
    """``"3:2.5,7:4"`` -> {3: 2.5, 7: 4.0}."""
    out: dict[int, float] = {}
    for item in filter(None, (t.strip() for t in str(text).split(","))):
        site, _, delay = item.partition(":")
        out[int(site)] = float(delay)
    return out


def parse_sites(text: str) -> set[int]:
    return {int(t) for t in str(text).split(",") if t.strip()}


def fault_injection_mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
    """Delay the training of straggler sites; make dropped sites go silent for ``drop-hang``
    seconds, then fail (a node that vanished). Only messages that carry a model are affected."""
    kind = msg.metadata.message_type
    if kind.split(".")[0] != MessageType.TRAIN or "arrays" not in msg.content:
        return call_next(msg, context)
    site = int(context.node_config.get("partition-id", -1))
    cfg = context.run_config
    if site in parse_sites(str(cfg.get("dropout-sites", ""))):
        time.sleep(float(cfg.get("drop-hang", 30.0)))
        return Message(
            Error(code=0, reason=f"site {site} dropped out (injected fault)"), reply_to=msg
        )
    delay = parse_delays(str(cfg.get("straggler-delays", ""))).get(site, 0.0)
    out = call_next(msg, context)
    time.sleep(delay)
    return out
