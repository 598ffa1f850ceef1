"""Runtime helpers for tests and benchmarks: a private local SuperLink for ``flwr run``
(:mod:`.local_superlink`), and in-process, bounded, offline Flower simulations and benchmark
child processes (:mod:`.flower_sim`).
"""
