"""ClientApp of the deployment app: one synthetic train function, reached three ways.

``mode`` (run config) picks the path of a train message:

- ``plain``, ``plain-fast``: straight to the train function (plain FedAvg);
- ``coded``: through ``coded_secagg_mod`` (and, for the fault test, :func:`tamper_mod`);
- ``secaggplus``: to a legacy ``ClientApp`` (``NumPyClient`` behind Flower's ``secaggplus_mod``).

Node config: ``site`` (the SuperNode's site index), ``partition-id``, ``num-partitions``.
"""

from __future__ import annotations

import time

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.client import NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp

from clients import coded_secagg_mod
from coded_fl.secagg.messages import Upload
from coded_fl.vocabulary import MSG_KEY
from coded_fl_flower.records import message_from, message_record
from simulations.deploy.tamper import forge_shares, signed_forgeries

EXAMPLES = 100  # num-examples every partition reports


def _sites(text: object) -> set[int]:
    return {int(t) for t in str(text).split(",") if t.strip()}


def synthetic_update(
    w: np.ndarray, *, partition: int, server_round: int, seed: int | None, context: Context
) -> np.ndarray:
    """A cheap deterministic "training" step for ``partition`` plus the emulated compute time.

    Every replica of a partition computes the same bits (the step depends only on the seed, or
    on (round, partition) where no seed is given); the site's compute time is ``train-seconds``,
    times ``slow-factor`` on a slow site.
    """
    rc = context.run_config
    site = int(context.node_config.get("site", -1))
    delay = float(rc.get("train-seconds", 0.0))
    if site in _sites(rc.get("slow-sites", "")):
        delay *= float(rc.get("slow-factor", 10.0))
    t0 = time.monotonic()
    rng = np.random.default_rng(seed if seed is not None else [server_round, partition, 7])
    step = rng.standard_normal(w.shape[0], dtype=np.float32)
    out = w + np.float32(0.01) * step
    time.sleep(max(0.0, delay - (time.monotonic() - t0)))
    return out


def _fit(msg: Message, context: Context) -> Message:
    conf = msg.content.get("config", {})
    seed = conf.get("codedfl.seed")  # type: ignore[union-attr]
    w = msg.content["arrays"]["w"].numpy()
    new = synthetic_update(
        w,
        partition=int(context.node_config["partition-id"]),
        server_round=int(conf.get("server-round", 0)),  # type: ignore[union-attr,arg-type]
        seed=None if seed is None else int(seed),  # type: ignore[arg-type]
        context=context,
    )
    return Message(
        RecordDict(
            {
                "arrays": ArrayRecord({"w": Array(new)}),
                "metrics": MetricRecord({"num-examples": EXAMPLES}),
            }
        ),
        reply_to=msg,
    )


def tamper_mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
    """Fault injection on site ``tamper-site``: one byte of the shares it uploads (addressed to
    silo ``tamper-target``, or to every silo if -1) is altered. ``tamper-mode = "signed"``
    (default): the silo alters them before it signs its entries, as a lying silo would; its
    recipients accuse it and the server's judgement names it. ``"relay"``: altered after
    signing, as on the relay path; the server refuses the upload, the signature does not
    verify. Its own TLS connection is intact either way."""
    rc = context.run_config
    culprit = int(rc.get("tamper-site", -1))
    if culprit < 0 or int(context.node_config.get("site", -1)) != culprit:
        return call_next(msg, context)
    target = int(rc.get("tamper-target", -1))
    if str(rc.get("tamper-mode", "signed")) == "signed":
        with signed_forgeries(target=target):
            return call_next(msg, context)
    reply = call_next(msg, context)
    if reply.has_error() or MSG_KEY not in reply.content:
        return reply
    up = message_from(reply.content)
    if not isinstance(up, Upload):
        return reply
    forged = forge_shares(up, target=target)
    reply.content[MSG_KEY] = message_record(forged)
    return reply


class SyntheticClient(NumPyClient):
    """The same synthetic step for Flower's legacy (SecAgg+) path."""

    def __init__(self, context: Context) -> None:
        self.context = context

    def fit(self, parameters, config):  # type: ignore[no-untyped-def]
        new = synthetic_update(
            parameters[0],
            partition=int(self.context.node_config["partition-id"]),
            server_round=int(config.get("server-round", 0)),
            seed=None,
            context=self.context,
        )
        return [new], EXAMPLES, {}


_secaggplus = ClientApp(
    client_fn=lambda context: SyntheticClient(context).to_client(), mods=[secaggplus_mod]
)


def route_mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
    mode = str(context.run_config.get("mode", "coded"))
    if mode == "secaggplus":
        return _secaggplus(msg, context)
    if mode == "coded":
        return tamper_mod(msg, context, lambda m, c: coded_secagg_mod(m, c, call_next))
    return call_next(msg, context)


app = ClientApp(mods=[route_mod])


@app.train()
def train(msg: Message, context: Context) -> Message:
    return _fit(msg, context)
