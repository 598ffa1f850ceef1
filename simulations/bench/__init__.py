"""Benchmarks: ``python -m simulations.bench NAME --out FILE.json [--quick]``.

Every benchmark times a baseline in the same process (or the same run) and reports ratios to
it; absolute times on a shared 2-core machine are noisy, ratios measured side by side are not.
"""

#: name -> module under simulations.bench that defines ``run(report, quick)``.
BENCHMARKS = {
    "accuracy": "simulations.bench.accuracy",
    "adversary": "simulations.bench.adversary",
    "codes": "simulations.bench.codes",
    "deploy": "simulations.bench.deploy",
    "dp": "simulations.bench.dp",
    "hetero": "simulations.bench.hetero",
    "kernels": "simulations.bench.kernels",
    "legacy": "simulations.bench.legacy",
    "placement": "simulations.bench.placement",
    "protocol": "simulations.bench.protocol",
    "rounds": "simulations.bench.rounds",
    "shuffling": "simulations.bench.shuffling",
    "stragglers": "simulations.bench.stragglers",
}

#: Wall seconds of each benchmark's ``--quick`` run, measured in CI on 2 cores (2026-11-26):
#: ``all --jobs N`` starts the longest first, so the last to finish is a short one.
QUICK_SECONDS = {
    "rounds": 82,
    "deploy": 80,
    "placement": 75,
    "hetero": 58,
    "accuracy": 53,
    "stragglers": 43,
    "legacy": 38,
}
