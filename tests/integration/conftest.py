"""The Flower projects under tests/integration are apps the tests copy and run, not test
modules: both are packages named ``quickstart``, so collecting them (doctests) would import
one under the other's name."""

collect_ignore_glob = ["quickstart*/*", "legacy_quickstart/*"]
