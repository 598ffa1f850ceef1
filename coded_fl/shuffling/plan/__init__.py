"""What a shuffle moves and what it can cost, before any byte moves: pure functions, no I/O.

- :mod:`~coded_fl.shuffling.plan.theory`: load formulas (:mod:`~coded_fl.shuffling.plan.loads`),
  converse bounds (:mod:`~coded_fl.shuffling.plan.bounds`), their sources;
- :mod:`~coded_fl.shuffling.plan.units`: unit ids, hashes, the padded layout;
- :mod:`~coded_fl.shuffling.plan.placement`: assignments, the gradient code's placement, caches
  and storage;
- :mod:`~coded_fl.shuffling.plan.planner`: centralized, decentralized and uncoded plans (the
  plan object in :mod:`~coded_fl.shuffling.plan.shuffle_plan`, the messages built in
  :mod:`~coded_fl.shuffling.plan.delivery`; at t >= 1 the holder-sourced delivery and the
  balanced reassignment it codes best in :mod:`~coded_fl.shuffling.plan.sources`).

Depends on nothing else in :mod:`coded_fl.shuffling`; the codec, storage and transport layers
build on it.
"""
