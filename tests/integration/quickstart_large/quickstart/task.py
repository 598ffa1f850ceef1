"""quickstart: model, data, training (ordinary Flower style), at a real dataset size.

Each of the partitions holds 20,000 examples (CIFAR-10 split over 2-3 sites is 16,000-25,000;
the run config's ``examples-per-partition``): 8x8 images drawn from a fixed generator and
labelled by a fixed linear teacher, so nothing is downloaded. Training shuffles with torch's
global RNG, unseeded, as ordinary projects do.

The model is a linear classifier; with ``embedding-rows`` R > 0 in the run config it also has
an R x 10 embedding table looked up by hashed features (R = 2,500,000: 25,000,650
parameters, a large model whose training touches a few entries a lot and most not at all).
The table takes sparse gradients, as large embedding tables usually do: plain SGD then moves
exactly the rows a batch looked up, the same update as with a dense gradient, without
writing 25 M zeros every step (3.0 s of CPU per 1,000 examples dense, 0.03 s sparse).
"""

import torch
from torch import nn

EXAMPLES_PER_PARTITION = 20_000
FEATURES = 64


class Net(nn.Module):
    def __init__(self, embedding_rows: int = 0) -> None:
        super().__init__()
        self.fc = nn.Linear(FEATURES, 10)
        self.rows = int(embedding_rows)
        self.emb = nn.EmbeddingBag(self.rows, 10, mode="sum", sparse=True) if self.rows else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(x)
        if self.emb is not None:
            ids = (x[:, :8].abs() * 1e4).long() % self.rows  # 8 hashed features per example
            out = out + self.emb(ids)
        return out


def _examples(seed: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(FEATURES, 10, generator=torch.Generator().manual_seed(7))
    x = torch.randn(count, FEATURES, generator=g)
    y = (x @ teacher + 0.5 * torch.randn(count, 10, generator=g)).argmax(1)
    return x, y


def load_data(partition_id: int, num_partitions: int, examples: int = EXAMPLES_PER_PARTITION):
    del num_partitions  # every partition has the same size
    return _examples(1000 + partition_id, examples), load_test()


def load_test():
    return _examples(1, 5_000)


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
