"""coded-fl deployment app: plain FedAvg, Flower SecAgg+ or coded-fl on a synthetic model."""
