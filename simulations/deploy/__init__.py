"""Deployment across sites: certificates and keys, a launcher for a real SuperLink and
SuperNodes (TLS, node authentication), a multi-site test bed on network namespaces with a
delaying proxy per site, and the apps the deployment benchmark runs.

Guide: ``docs/deploy.md``. Entry points: ``python -m simulations.deploy.certs``,
``python -m simulations.deploy.launcher down RUN_DIR``, ``python -m simulations.deploy.netem``;
the app: ``flwr run simulations/deploy/app <connection>``.
"""
