"""quickstart: a Flower / PyTorch app whose model has BatchNorm layers."""

import tempfile
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from quickstart.task import Net, load_test
from quickstart.task import test as test_fn

# Create ServerApp
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Main entry point for the ServerApp."""
    num_rounds: int = context.run_config["num-server-rounds"]
    lr: float = context.run_config["learning-rate"]
    model_dir = Path(str(context.run_config.get("model-dir", "")) or tempfile.mkdtemp())

    def global_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        """Keep every round's global model (arrays as they are, dtypes included) and evaluate
        it on the server's held-out data."""
        np.savez(
            model_dir / f"round_{server_round}.npz", **{k: v.numpy() for k, v in arrays.items()}
        )
        model = Net()
        model.load_state_dict(arrays.to_torch_state_dict())
        loss, accuracy = test_fn(model, load_test())
        return MetricRecord({"accuracy": accuracy, "loss": loss})

    # Load global model
    global_model = Net()
    arrays = ArrayRecord(global_model.state_dict())

    # Initialize FedAvg strategy
    strategy = FedAvg(fraction_evaluate=1.0, min_available_nodes=4)

    # Start strategy, run FedAvg for `num_rounds`
    strategy.start(
        grid=grid,
        initial_arrays=arrays,
        train_config=ConfigRecord({"lr": lr}),
        num_rounds=num_rounds,
        evaluate_fn=global_evaluate,
    )
