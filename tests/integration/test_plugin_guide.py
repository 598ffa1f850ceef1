"""The README's "Plug into an existing Flower project" guide, proven.

The diff blocks are read from README.md and applied to a copy of an ordinary Flower project
(`tests/integration/quickstart`, plain FedAvg); nothing else is changed. The result must run
with `flwr run` on a local SuperLink and complete its rounds with coded secure aggregation: that
run is in `tests/integration/test_wheel.py` (against the installed wheel); here, the guide's
blocks and what applying them changes.
"""

from __future__ import annotations

import importlib.util
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from clients.mod import partition_seed

ROOT = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).with_name("quickstart")


def guide_blocks(subsection: str | None = None) -> list[tuple[str, list[str], list[str]]]:
    """(file, old lines, new lines) of every diff block of the guide's section: the part before
    its first subsection (the Message-API guide), or the subsection whose heading starts with
    ``subsection``."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Plug into an existing Flower project", 1)[1].split("\n## ", 1)[0]
    if subsection is None:
        section = section.split("\n### ", 1)[0]
    else:
        section = section.split("\n### " + subsection, 1)[1].split("\n### ", 1)[0]
    blocks = []
    for path, body in re.findall(r"\*\*`([^`]+)`\*\*\n```diff\n(.*?)```", section, re.S):
        old, new = [], []
        for line in body.rstrip("\n").split("\n"):
            tag, text = line[:1], line[1:]
            if tag in (" ", "-"):
                old.append(text)
            if tag in (" ", "+"):
                new.append(text)
        blocks.append((path, old, new))
    return blocks


def apply_guide(dst: Path, blocks: list[tuple[str, list[str], list[str]]] | None = None) -> None:
    """Apply ``blocks`` (default: the Message-API guide) to the project copy at ``dst``."""
    for path, old, new in guide_blocks() if blocks is None else blocks:
        target = dst / path
        text = target.read_text()
        before, after = "\n".join(old), "\n".join(new)
        assert text.count(before) == 1, f"{path}: the guide's lines are not in the project once"
        target.write_text(text.replace(before, after))


def run_guided(
    project: Path, tmp_path: Path, *, num_supernodes: int = 4, run_config: str = ""
) -> tuple[str, Path]:
    """Copy ``project`` under ``tmp_path``, apply the Message-API guide and ``flwr run`` it on a
    local SuperLink with ``model-dir`` set (and ``run_config``, more ``key=value`` pairs);
    returns (the run's output, the model folder)."""
    from simulations.runtime.local_superlink import LocalSuperLink

    dst = tmp_path / "quickstart"
    shutil.copytree(project, dst, ignore=shutil.ignore_patterns("__pycache__"))
    apply_guide(dst)
    models = tmp_path / "models"
    models.mkdir()
    with LocalSuperLink(tmp_path / "flwr-home") as link:
        out = link.run(
            dst,
            num_supernodes=num_supernodes,
            run_config=f'model-dir="{models}" {run_config}'.strip(),
            timeout=600,
        )
    return out, models


def project_task(dst: Path, name: str):  # type: ignore[no-untyped-def]
    """The guided project's ``quickstart/task.py``, imported under ``name``."""
    spec = importlib.util.spec_from_file_location(name, dst / "quickstart" / "task.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seed_as_the_mod(seed_id: str, protocol_round: int, k: int) -> None:
    """Seed torch, NumPy and ``random`` as the mod did for partition k of that round."""
    seed = partition_seed(seed_id, protocol_round, k)
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def test_guide_has_blocks_for_both_sides_and_the_project_is_ordinary():
    blocks = guide_blocks()
    files = {p for p, _, _ in blocks}
    assert files == {"quickstart/server_app.py", "quickstart/client_app.py", "pyproject.toml"}
    for path in files:
        assert "coded" not in (PROJECT / path).read_text().lower()  # plain Flower before


def test_applying_the_guide_changes_only_those_lines(tmp_path):
    dst = tmp_path / "quickstart"
    shutil.copytree(PROJECT, dst)
    apply_guide(dst)
    for path, _old, new in guide_blocks():
        changed = (dst / path).read_text()
        assert "\n".join(new) in changed
    original = {p.relative_to(PROJECT): p.read_text() for p in PROJECT.rglob("*.py")}
    for rel, text in original.items():
        if str(rel) not in {p for p, _, _ in guide_blocks()}:
            assert (dst / rel).read_text() == text


# The patched quickstart's `flwr run` (two rounds, the model saved where the run config says) is
# tests/integration/test_wheel.py::test_the_plugin_guide_runs_against_the_installed_wheel: the
# guide applied to this project, run against the installed wheel (one run serves both).
