"""quickstart: a Flower / PyTorch app with server-side evaluation."""

import json
import tempfile
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from quickstart.task import Net, load_test
from quickstart.task import test as test_fn

# Create ServerApp
app = ServerApp()


def evaluator(embedding_rows: int):
    def global_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        """Evaluate the global model on the server's held-out data."""
        model = Net(embedding_rows)
        model.load_state_dict(arrays.to_torch_state_dict())
        loss, accuracy = test_fn(model, load_test())
        return MetricRecord({"accuracy": accuracy, "loss": loss})

    return global_evaluate


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Main entry point for the ServerApp."""
    num_rounds: int = context.run_config["num-server-rounds"]
    lr: float = context.run_config["learning-rate"]

    # Load global model
    embedding_rows: int = context.run_config["embedding-rows"]
    global_model = Net(embedding_rows)
    arrays = ArrayRecord(global_model.state_dict())

    # Initialize FedAvg strategy
    strategy = FedAvg(fraction_evaluate=1.0, min_available_nodes=4)

    # Start strategy, run FedAvg for `num_rounds`
    result = strategy.start(
        grid=grid,
        initial_arrays=arrays,
        train_config=ConfigRecord({"lr": lr}),
        num_rounds=num_rounds,
        evaluate_fn=evaluator(embedding_rows),
    )

    # Save the initial and final models: into `model-dir` (default: a new temporary folder)
    model_dir = Path(str(context.run_config.get("model-dir", "")) or tempfile.mkdtemp())
    torch.save(global_model.state_dict(), model_dir / "initial_model.pt")
    path = model_dir / "final_model.pt"
    print(f"\nSaving final model to {path}...")
    torch.save(result.arrays.to_torch_state_dict(), path)
    metrics = {r: dict(m) for r, m in result.train_metrics_clientapp.items()}
    (model_dir / "train_metrics.json").write_text(json.dumps(metrics))
