"""The main job is a Hub-ready Flower app: ``flwr build`` makes its FAB offline.

``[tool.flwr.app]`` declares ``fab-format-version = 1`` (Flower then requires
``flwr-version-target`` within the declared ``flwr`` range and ``[project].license`` as a
root-level ``LICENSE`` file that goes into the FAB). The FAB carries the code the job imports,
README and LICENSE, and nothing large: no ``.venv`` (present in a checkout set up by
``scripts/setup.sh``), no tests, no docs or benchmark data. ``flwr run .`` builds the same FAB,
so these rules hold for the main job too. The files also pass the checks ``flwr app publish``
makes before an upload (count, size, UTF-8).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomli  # a Flower dependency (tomllib is Python 3.11+)
from flwr.cli.build import build_fab_from_disk
from packaging.requirements import Requirement

from simulations.runtime.local_superlink import offline_env

ROOT = Path(__file__).resolve().parents[2]
NEEDED = (
    "pyproject.toml",
    "LICENSE",
    "README.md",
    ".info/CONTENT",
    "simulations/app/server_app.py",
    "simulations/app/client_app.py",
    "coded_fl/__init__.py",
    "coded_fl_flower/__init__.py",
    "strategies/coded_secagg.py",
    "clients/mod.py",
)
LEFT_OUT = (".venv/", "docs/", "tests/", "results/", ".flwr-home/", ".git/", "scripts/")


def _check_fab(names: list[str], fab: zipfile.ZipFile) -> None:
    for needed in NEEDED:
        assert needed in names, needed
    assert not [n for n in names if n.startswith(LEFT_OUT) or "__pycache__" in n]
    assert sum(i.file_size for i in fab.infolist()) < 3 * 2**20  # about 1 MB today
    config = tomli.loads(fab.read("pyproject.toml").decode())
    app = config["tool"]["flwr"]["app"]
    assert app["fab-format-version"] == 1
    (flwr,) = [
        Requirement(d) for d in config["project"]["dependencies"] if Requirement(d).name == "flwr"
    ]
    assert app["flwr-version-target"] in flwr.specifier
    assert config["project"]["license"] == {"file": "LICENSE"}
    assert "Apache License" in fab.read("LICENSE").decode()


def test_the_fab_of_this_checkout_holds_the_app_and_nothing_large(tmp_path) -> None:
    out = tmp_path / "app.fab"
    out.write_bytes(build_fab_from_disk(ROOT))  # the validation `flwr build` and `flwr run` do
    with zipfile.ZipFile(out) as fab:
        _check_fab(fab.namelist(), fab)


def test_flwr_build_makes_the_fab_offline(tmp_path) -> None:
    # `flwr build` wants the app folder named like an app: a copy named coded-fl
    app = tmp_path / "coded-fl"
    shutil.copytree(
        ROOT,
        app,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "__pycache__", ".flwr-home", "results", ".*_cache", ".hypothesis"
        ),
    )
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "flwr"), "build", "--app", str(app)],
        cwd=out,
        env=offline_env(tmp_path / "flwr-home"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert "missing the following recommended properties" not in text
    (fab_file,) = out.glob("coded-fl.coded-fl.0-1-0.*.fab")
    assert "Successfully built" in text and fab_file.name in text
    with zipfile.ZipFile(fab_file) as fab:
        _check_fab(fab.namelist(), fab)


def test_the_files_pass_the_hub_upload_checks() -> None:
    publish = pytest.importorskip("flwr.cli.app_cmd.publish")
    if not hasattr(publish, "_collect_file_paths") or not hasattr(publish, "_validate_files"):
        pytest.skip("this Flower release checks uploads differently")
    paths = publish._collect_file_paths(ROOT)
    publish._validate_files(paths)  # raises click.ClickException on a failed check
    rel = {p.relative_to(ROOT).as_posix() for p in paths}
    assert "LICENSE" in rel and "pyproject.toml" in rel
    assert not [p for p in rel if p.startswith((".venv/", "results/", ".flwr-home/"))]
    description = tomli.loads((ROOT / "pyproject.toml").read_text())["project"]["description"]
    assert 0 < len(description) <= 200  # the Hub's limit
