"""Cost prototype of a one-round-trip coded round (group-aligned masks), in the Flower simulation.

**Not a protocol and not secure**: the edge keys are public constants (no key exchange, no
dealing), there is no weight channel, no metrics, no fault handling. It measures what a round
of the design in ``docs/protocol.md`` ("Next: one round trip with group-aligned masks") would
cost on this machine, with the product's own pieces where they exist:

- silo: the repetition code of ``make_code(n, s)`` (as ``CodedSecAgg`` picks it), the user's
  train function once per held partition, the weighted-delta kernel, a SHA-256 of the model
  (the mask is bound to it), the group mask (:func:`coded_fl.secagg.aligned.group_mask`: one
  AES-CTR stream per mask-graph edge at the silo's group) and the fused quantize-and-encode
  (:func:`coded_fl.pipeline.encode_upload`); one ``uint32`` reply of d elements;
- server: the code's decode (one reply per group, the others compared bit for bit) and the
  dequantization, in ``aggregate_train`` of a FedAvg, as the rounds benchmark times plain
  FedAvg: one round trip, every silo asked, dropped silos failing at once.

Run (the rounds benchmark's settings: d = 1e6, 10 % of silos dropping)::

    python -m simulations.prototypes.one_trip 20 --rounds 10 --variants plain,one-trip,ours

prints the per-round wall times and their medians over rounds 2..R. ``ours`` is today's
``CodedSecAgg`` (two round trips).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from coded_fl.codes import make_code
from coded_fl.field import PrimeField
from coded_fl.kernels import cpu as kernels
from coded_fl.pipeline import encode_upload
from coded_fl.quantize import QuantizationConfig, RoundingKey, dequantize
from coded_fl.secagg.aligned import group_mask, mask_context, mask_graph
from simulations.bench import rounds as bench

P = 2**31 - 1
RUN = b"one-trip-prototype"
CLIP = 1.0


def _setup(n: int) -> tuple:  # type: ignore[type-arg]
    s = max(1, n // 10)  # the rounds benchmark's s = T
    code = make_code(n, s)
    edges = mask_graph(len(code.groups), s)
    # PROTOTYPE ONLY: public edge keys (the design deals them sealed, once per run)
    keys = {e: hashlib.sha256(b"public prototype key %d %d" % e).digest() for e in edges}
    quant = QuantizationConfig.for_summands(code.K, clip_range=CLIP, p=P)
    return s, code, edges, keys, quant


def _mod(n: int):  # type: ignore[no-untyped-def]
    _, code, edges, keys, quant = _setup(n)
    field = PrimeField(P)

    def mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
        silo = int(context.node_config["partition-id"])
        rnd = int(msg.content["config"]["server-round"])
        theta = next(iter(msg.content["arrays"].values())).numpy()
        digest = hashlib.sha256(memoryview(theta)).digest()
        partials = []
        for k in code.support(silo):
            sub = Context(
                run_id=context.run_id,
                node_id=context.node_id,
                node_config={**context.node_config, "partition-id": k},
                state=RecordDict(),
                run_config=context.run_config,
            )
            new = next(iter(call_next(msg, sub).content["arrays"].values())).numpy()
            out = np.empty(theta.size, dtype=np.float32)
            kernels.weighted_delta(
                new, theta, out, np.float32(1.0 / code.K), np.float32(1.0), np.float32(CLIP)
            )
            partials.append(torch.from_numpy(out))
        coeffs = code.coefficients(silo)
        mask = group_mask(
            keys,
            edges,
            code.group_of(silo),
            length=theta.size,
            field=field,
            run_id=RUN,
            round_=rnd,
            context=mask_context(b"", digest),
            scale=int(coeffs[0]),
        )
        rkeys = [RoundingKey.for_partition("proto", rnd, k) for k in code.support(silo)]
        up = encode_upload(partials, coeffs, rkeys, quant, field, mask=torch.from_numpy(mask))
        content = RecordDict(
            {
                "arrays": ArrayRecord([up.numpy()]),  # type: ignore[list-item]
                "metrics": MetricRecord({"num-examples": 1, "silo": silo}),
            }
        )
        return Message(content, reply_to=msg)

    return mod


class _OneTripAvg(FedAvg):
    def __init__(self, stamps: list[float], n: int, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.stamps = stamps
        _, self.code, _, _, self.quant = _setup(n)
        self.field = PrimeField(P)

    def aggregate_train(self, server_round, replies):  # type: ignore[no-untyped-def]
        got = {}
        for m in replies:
            if not m.has_error():
                silo = int(m.content["metrics"]["silo"])
                arr = next(iter(m.content["arrays"].values())).numpy()
                got[silo] = torch.from_numpy(arr)
        total = self.code.decode(got)
        avg = dequantize(total, self.quant, self.field).to(torch.float32).numpy()
        self.stamps.append(time.monotonic())
        return ArrayRecord([avg]), MetricRecord({})  # type: ignore[list-item]


def _one_trip(n: int, d: int, rounds: int, stamps: list[float]) -> tuple[ServerApp, ClientApp]:
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = _OneTripAvg(
            stamps, n, fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n
        )
        stamps.append(time.monotonic())
        strategy.start(grid=grid, initial_arrays=bench._initial(d), num_rounds=rounds, timeout=300)

    client = ClientApp(mods=[bench._drop_mod(n), _mod(n)])
    client.train()(bench._train_fn)
    return server, client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("silos", type=int)
    parser.add_argument("--dim", type=float, default=1e6)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--variants", default="plain,one-trip,ours")
    args = parser.parse_args()
    n, d, rounds = args.silos, int(args.dim), args.rounds
    medians = {}
    for name in args.variants.split(","):
        stamps: list[float] = []
        if name == "plain":
            server, client = (
                bench._plain_server(n, d, rounds, stamps),
                bench._client(n, coded=False),
            )
        elif name == "one-trip":
            server, client = _one_trip(n, d, rounds, stamps)
        elif name == "ours":
            server, client = bench._coded_server(n, d, rounds, stamps), bench._client(n, coded=True)
        else:
            raise SystemExit(f"unknown variant {name!r}: plain, one-trip or ours")
        bench._simulate(server, client, n)
        per = bench._per_round(stamps)
        medians[name] = statistics.median(per[1:]) if len(per) > 1 else float("nan")
        print(f"{name}: rounds {[round(x, 3) for x in per]} median {medians[name]:.3f} s")
    if "plain" in medians:
        ratios = {k: round(v / medians["plain"], 3) for k, v in medians.items()}
        print(json.dumps({"n": n, "d": d, "median_s": medians, "over_plain": ratios}))


if __name__ == "__main__":
    main()
