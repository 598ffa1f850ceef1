"""Coded shuffling places the gradient code's data in a Flower simulation (issue 17)."""
