"""Accuracy experiments: plain FedAvg vs coded-fl in a real Flower simulation on the shipped
MNIST digits (:mod:`.flower`), and the quantization error of the aggregate against the scale in
the in-memory harness (:mod:`.quantization`). The benchmark that runs them:
``python -m simulations.bench accuracy``.
"""
