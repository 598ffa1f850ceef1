"""Straggler experiments: the silo-time model and its order-statistic theory (:mod:`.model`),
a discrete-event simulation of a round on a virtual clock (:mod:`.des`) with compute costs
measured in the in-memory harness (:mod:`.costs`), and a real Flower simulation with injected
delays (:mod:`.flower`). The benchmark that runs them: ``python -m simulations.bench stragglers``.
"""
