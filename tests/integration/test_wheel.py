"""The install route, proven on the built wheel, not on the source tree.

``python -m build`` (offline: ``--no-isolation``, with the test extras' ``build`` and
``hatchling``) makes the sdist and the wheel. The wheel must install ``coded_fl`` and
``coded_fl_flower`` only (the adapters' folders ``strategies/`` and ``clients/`` inside the latter,
no top-level ``strategies``, ``clients``, ``simulations`` or ``tests``).

It is then installed with ``pip install --no-deps`` into a fresh virtual environment that sees
this environment's site-packages through a ``.pth`` file (so torch, flwr and the rest need no
reinstall offline; that folder's own ``.pth`` files, such as an editable install of this
checkout, are not processed there). Flower's commands get copies in the new environment that run
its interpreter. The README's plug-in guide, applied to the quickstart project, then runs with
``flwr run`` from a temporary folder, without this checkout on ``PYTHONPATH``, and each app
process records where ``coded_fl_flower`` and ``coded_fl`` came from: the new environment.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ONLY = {"strategies", "clients", "simulations", "tests"}  # never top-level in the wheel


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path


@dataclass(frozen=True)
class Venv:
    root: Path
    python: Path
    site: Path


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(*cmd: str | Path, cwd: Path) -> str:
    """Run ``cmd`` in ``cwd`` without this checkout on ``PYTHONPATH``; its stdout, or fail."""
    done = subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT, cwd=out)
    (wheel,) = out.glob("coded_fl-*-py3-none-any.whl")
    (sdist,) = out.glob("coded_fl-*.tar.gz")
    return Dist(wheel, sdist)


@pytest.fixture(scope="module")
def venv(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    root = tmp_path_factory.mktemp("venv") / "env"
    _run(sys.executable, "-m", "venv", "--without-pip", root, cwd=root.parent)
    python = root / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run(python, "-c", purelib, cwd=root).strip())
    # the dependencies: this environment's site-packages, after the new one's own
    ours = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    (site / "_coded_fl_test_dependencies.pth").write_text("\n".join(ours) + "\n")
    _run(
        *(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index"),
        *("--ignore-installed", "--quiet", dist.wheel),
        cwd=root,
    )
    # Flower's commands, run by the new environment's interpreter
    for script in Path(sys.executable).parent.iterdir():
        if not script.name.startswith(("flwr", "flower-")) or not script.is_file():
            continue
        first, _, rest = script.read_text().partition("\n")
        if first.startswith("#!"):
            copy = root / "bin" / script.name
            copy.write_text(f"#!{python}\n{rest}")
            copy.chmod(0o755)
    assert (root / "bin" / "flwr").is_file() and (root / "bin" / "flower-superlink").is_file()
    return Venv(root, python, site)


def _top_level_imports(source: str, *, unconditional: bool = False) -> set[str]:
    """The top-level packages a module imports (``unconditional``: outside ``if`` blocks)."""
    tree = ast.parse(source)
    nodes = tree.body if unconditional else list(ast.walk(tree))
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_wheel_holds_coded_fl_and_coded_fl_flower_only(dist: Dist) -> None:
    with zipfile.ZipFile(dist.wheel) as zf:
        names = zf.namelist()
        sources = {n: zf.read(n).decode() for n in names if n.endswith(".py")}
        meta = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"coded_fl", "coded_fl_flower"}
    assert not tops & SOURCE_ONLY
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # every adapter module, mapped under coded_fl_flower/
    for folder in ("strategies", "clients"):
        for src in (ROOT / folder).glob("*.py"):
            assert f"coded_fl_flower/{folder}/{src.name}" in names, src
    # nothing in the wheel imports a package that the wheel does not install (but
    # coded_fl_flower/__init__.py, only where strategies/ is not beside it: the source tree)
    public = "coded_fl_flower/__init__.py"
    for name, text in sources.items():
        assert not _top_level_imports(text, unconditional=name == public) & SOURCE_ONLY, name
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "Requires-Dist: flwr[simulation]" in meta


def test_the_sdist_builds_the_wheel_and_leaves_out_bench_data(dist: Dist) -> None:
    with tarfile.open(dist.sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for needed in ("LICENSE", "pyproject.toml", "README.md", "coded_fl_flower/__init__.py"):
        assert needed in names
    assert "strategies/coded_secagg.py" in names and "clients/mod.py" in names
    assert not [n for n in names if n.startswith(("docs/bench/", "docs/report/", ".ci/"))]


def test_the_installed_wheel_imports_from_the_new_environment(venv: Venv, tmp_path) -> None:
    probe = (
        "import json, coded_fl, coded_fl_flower\n"
        "from coded_fl_flower import CodedSecAgg, coded_secagg_mod\n"
        "print(json.dumps({'flower': coded_fl_flower.__file__, 'core': coded_fl.__file__,\n"
        "    'cls': CodedSecAgg.__module__, 'mod': coded_secagg_mod.__module__,\n"
        "    'all': sorted(coded_fl_flower.__all__)}))\n"
    )
    got = json.loads(_run(venv.python, "-c", probe, cwd=tmp_path).strip().splitlines()[-1])
    assert Path(got["flower"]).is_relative_to(venv.site)
    assert Path(got["core"]).is_relative_to(venv.site)
    assert got["cls"] == "coded_fl_flower.strategies.coded_secagg"
    assert got["mod"] == "coded_fl_flower.clients.mod"
    assert {"CodedSecAgg", "RoundReport", "coded_secagg_mod", "ClientPolicy"} <= set(got["all"])
    for name in SOURCE_ONLY:
        assert not (venv.site / name).exists()


#: appended to the patched quickstart's apps: where each app process took coded-fl from
PROBE = """

import os as _os
import sys as _sys

import coded_fl as _core
import coded_fl_flower as _flower

with open(_os.environ["CODED_FL_TEST_WHERE"], "a") as _f:
    _top = [m for m in ("strategies", "clients", "simulations") if m in _sys.modules]
    _f.write(" ".join(["{side}", _flower.__file__, _core.__file__, _sys.executable, *_top]))
    _f.write("\\n")
"""


@pytest.mark.integration
@pytest.mark.slow
def test_the_plugin_guide_runs_against_the_installed_wheel(venv: Venv, tmp_path) -> None:
    from simulations.runtime.local_superlink import LocalSuperLink
    from tests.integration.test_plugin_guide import PROJECT, apply_guide

    dst = tmp_path / "quickstart"
    shutil.copytree(PROJECT, dst, ignore=shutil.ignore_patterns("__pycache__"))
    apply_guide(dst)
    for side in ("server", "client"):
        app = dst / "quickstart" / f"{side}_app.py"
        app.write_text(app.read_text() + PROBE.format(side=side))
    where = tmp_path / "where.txt"
    models = tmp_path / "models"
    work = tmp_path / "work"  # every process's working folder: not this checkout
    models.mkdir()
    work.mkdir()
    link = LocalSuperLink(tmp_path / "flwr-home", python=venv.python, cwd=work)
    link.env.pop("PYTHONPATH", None)
    link.env["CODED_FL_TEST_WHERE"] = str(where)
    with link:
        out = link.run(
            dst,
            num_supernodes=4,
            run_config=f'model-dir="{models}" num-server-rounds=2',
            timeout=600,
        )
    # the patched quickstart completes its rounds (this is also the plug-in guide's own run:
    # the guide applied to the quickstart, run with `flwr run` on a local SuperLink)
    assert "[coded-fl] round 1: used" in out, out[-3000:]
    assert "[coded-fl] round 2: used" in out, out[-3000:]
    assert "ABORTED" not in out
    assert (models / "final_model.pt").is_file()  # saved where the run config says, not the cwd
    lines = [line.split() for line in where.read_text().splitlines()]
    assert {line[0] for line in lines} == {"server", "client"}, lines
    for side, flower, core, python, *top in lines:
        assert Path(flower).is_relative_to(venv.site), (side, flower)
        assert Path(core).is_relative_to(venv.site), (side, core)
        assert Path(python).parent == venv.python.parent, (side, python)
        assert not top, (side, top)  # nothing from the source tree was imported
