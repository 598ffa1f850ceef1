"""quickstart: a Flower / PyTorch app."""

import json
import tempfile
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from quickstart.task import Net

# Create ServerApp
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Main entry point for the ServerApp."""
    num_rounds: int = context.run_config["num-server-rounds"]
    lr: float = context.run_config["learning-rate"]

    # Load global model
    global_model = Net()
    arrays = ArrayRecord(global_model.state_dict())

    # Initialize FedAvg strategy
    strategy = FedAvg(fraction_evaluate=1.0, min_available_nodes=4)

    # Start strategy, run FedAvg for `num_rounds`
    result = strategy.start(
        grid=grid,
        initial_arrays=arrays,
        train_config=ConfigRecord({"lr": lr}),
        num_rounds=num_rounds,
    )

    # Save final model to disk: into `model-dir` (default: a new temporary folder)
    model_dir = str(context.run_config.get("model-dir", ""))
    path = Path(model_dir or tempfile.mkdtemp(prefix="quickstart-")) / "final_model.pt"
    print(f"\nSaving final model to {path}...")
    state_dict = result.arrays.to_torch_state_dict()
    torch.save(state_dict, path)
    metrics = {r: dict(m) for r, m in result.train_metrics_clientapp.items()}
    (path.parent / "train_metrics.json").write_text(json.dumps(metrics))
