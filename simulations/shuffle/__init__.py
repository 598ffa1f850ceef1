"""Coded data shuffling experiments: one shuffle over K simulated silos on real bytes, in one
process or through a Flower simulation (:mod:`.cli`, run as ``python -m simulations.shuffle``),
and the Flower simulation itself (:mod:`.flower`). The benchmark of loads and codec:
``python -m simulations.bench shuffling``.
"""
