"""ClientApp: the shuffle handler, and a train function that reads partition k from the silo's
store (``clients.data``): a synthetic step w + mean(x) of the partition, num-examples = its
size, so the server can check that the aggregate used exactly the placed data."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from clients import coded_secagg_mod, partition_arrays, register_shuffle, silo_data_mod

app = ClientApp(mods=[silo_data_mod, coded_secagg_mod])
register_shuffle(app)


@app.train()
def train(msg: Message, context: Context) -> Message:
    data = partition_arrays(msg, context)
    w = msg.content["arrays"]["w"].numpy()
    new = (w + 0.01 * float(np.mean(data["x"]))).astype(np.float32)
    return Message(
        RecordDict(
            {
                "arrays": ArrayRecord({"w": Array(new)}),
                "metrics": MetricRecord({"num-examples": len(data["y"])}),
            }
        ),
        reply_to=msg,
    )
