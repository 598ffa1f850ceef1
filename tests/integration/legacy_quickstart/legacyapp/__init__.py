"""legacyapp: a Flower / PyTorch app in the legacy style."""
