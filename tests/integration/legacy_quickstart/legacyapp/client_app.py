"""legacyapp: a Flower / PyTorch app in the legacy style."""

from flwr.client import ClientApp, NumPyClient
from flwr.common import Context

from legacyapp.task import Net, get_weights, load_data, set_weights
from legacyapp.task import test as test_fn
from legacyapp.task import train as train_fn


class FlowerClient(NumPyClient):
    def __init__(self, trainset, testset, steps: int, lr: float) -> None:
        self.net = Net()
        self.trainset, self.testset = trainset, testset
        self.steps, self.lr = steps, lr

    def fit(self, parameters, config):
        set_weights(self.net, parameters)
        loss = train_fn(self.net, self.trainset, self.steps, self.lr)
        return get_weights(self.net), len(self.trainset[1]), {"train_loss": loss}

    def evaluate(self, parameters, config):
        set_weights(self.net, parameters)
        loss, acc = test_fn(self.net, self.testset)
        return loss, len(self.testset[1]), {"accuracy": acc}


def client_fn(context: Context):
    partition_id = context.node_config["partition-id"]
    num_partitions = context.node_config["num-partitions"]
    trainset, testset = load_data(partition_id, num_partitions)
    steps = context.run_config["local-steps"]
    lr = context.run_config["learning-rate"]
    return FlowerClient(trainset, testset, steps, lr).to_client()


# Flower ClientApp
app = ClientApp(client_fn)
