"""Simulations, benchmarks and the main Flower app of coded-fl (guide: simulations/README.md)."""
