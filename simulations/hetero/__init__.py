"""The heterogeneity test bed (issue 12): how much replicas of one partition disagree when they
are trained on machines that differ (thread counts, CPU instruction sets).
``python -m simulations.hetero.measure --out FILE.json [--quick]``."""
