"""legacyapp: a Flower / PyTorch app in the legacy style."""

import tempfile
from pathlib import Path

import numpy as np
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import ServerApp, ServerAppComponents, ServerConfig
from flwr.server.strategy import FedAvg

from legacyapp.task import Net, get_weights, load_data, set_weights
from legacyapp.task import test as test_fn


def server_fn(context: Context):
    num_rounds = context.run_config["num-server-rounds"]
    model_dir = Path(str(context.run_config["model-dir"]) or tempfile.mkdtemp(prefix="legacy-"))
    _, testset = load_data(0, 1)

    def evaluate(server_round, parameters, config):
        """Centralized evaluation; keeps the global model of every round."""
        np.savez(model_dir / f"round_{server_round}.npz", *parameters)
        net = Net()
        set_weights(net, parameters)
        loss, acc = test_fn(net, testset)
        print(f"[legacyapp] round {server_round}: accuracy {acc:.4f}")
        return loss, {"accuracy": acc}

    strategy = FedAvg(
        fraction_fit=1.0,
        fraction_evaluate=1.0,
        min_available_clients=4,
        initial_parameters=ndarrays_to_parameters(get_weights(Net())),
        evaluate_fn=evaluate,
    )
    config = ServerConfig(num_rounds=num_rounds)
    return ServerAppComponents(strategy=strategy, config=config)


# Create ServerApp
app = ServerApp(server_fn=server_fn)
