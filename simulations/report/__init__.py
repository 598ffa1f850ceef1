"""The evidence report: ``python -m simulations.report`` reads the benchmarks' JSON files and
writes one Markdown file (:mod:`.document`) with its figures beside it (:mod:`.figures`).
"""
