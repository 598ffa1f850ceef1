"""quickstart: a Flower / PyTorch app."""
