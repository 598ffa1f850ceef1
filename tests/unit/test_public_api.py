"""``coded_fl_flower`` in the source tree: the adapters' public API, and one import path per
module (issue 28, item 9).

Before, the package registered the top-level ``strategies`` and ``clients`` in ``sys.modules``
as ``coded_fl_flower.strategies`` / ``.clients``; importing a submodule by the second spelling
(``import coded_fl_flower.strategies.run``) then loaded ``strategies/run.py`` a second time, and
``strategies.run.RunState is coded_fl_flower.strategies.run.RunState`` was False (an
``isinstance`` across the two copies fails). Each check runs in a fresh interpreter, so what
other tests imported does not matter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, sys
import clients, strategies, coded_fl_flower
import strategies.run, clients.mod
from coded_fl_flower import CodedSecAgg, coded_secagg_mod
try:
    import coded_fl_flower.strategies.run
    second = "imported"
except ModuleNotFoundError as exc:
    second = exc.name
files = {}
for name, mod in list(sys.modules.items()):
    path = getattr(mod, "__file__", None)
    if path and name.split(".")[0] in ("strategies", "clients", "coded_fl_flower"):
        files.setdefault(path, []).append(name)
print(json.dumps({
    "source_tree": coded_fl_flower.SOURCE_TREE,
    "all": coded_fl_flower.__all__,
    "clients_all": clients.__all__,
    "strategies_all": strategies.__all__,
    "same_class": CodedSecAgg is strategies.CodedSecAgg,
    "same_mod": coded_secagg_mod is clients.coded_secagg_mod,
    "second": second,
    "twice": {p: n for p, n in files.items() if len(n) > 1},
    "subpackages": sorted(
        n for n in sys.modules
        if n.startswith(("coded_fl_flower.strategies", "coded_fl_flower.clients"))
    ),
}))
"""


def _probe() -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_adapter_module_has_one_import_path_in_the_source_tree() -> None:
    got = _probe()
    assert got["source_tree"] is True
    # the public names are the adapters' own objects, not copies
    assert got["same_class"] and got["same_mod"]
    # no module file is loaded under two names, and no coded_fl_flower.strategies/.clients
    # alias is registered (coded_fl_flower.records, the adapters' shared module, is its own)
    assert got["twice"] == {}, got["twice"]
    assert got["subpackages"] == [], got["subpackages"]
    # the wheel's spelling does not exist here: a clear ModuleNotFoundError, not a second copy
    assert got["second"] == "coded_fl_flower.strategies", got["second"]


def test_the_public_api_is_exactly_the_adapters_api_plus_the_policy() -> None:
    got = _probe()
    want = ["AbortCode", "ClientPolicy", *got["clients_all"], *got["strategies_all"]]
    assert sorted(got["all"]) == sorted(want)
    assert len(set(got["all"])) == len(got["all"])
