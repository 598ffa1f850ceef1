"""The one protocol driver (:mod:`coded_fl.secagg.driver`, with its transport and reply
handling): it alone orders the server machine's calls, every runtime (Flower, the in-memory
harness, the cost model) goes through it, and its closing rules run on the transport's
clock."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.messages import SERVER, Refusal, RefusalCode, Upload
from coded_fl.secagg.replies import SiloNotes, take
from coded_fl.secagg.transport import Reply, Waits
from simulations.runtime.secagg_harness import Harness, Silo

ROOT = Path(__file__).resolve().parents[2]

#: The server machine's flow, which the driver follows (``next_action`` says what comes next).
FLOW = {"open_key_exchange", "open_round", "next_action", "stop_waiting", "compute"}
#: The machine's own steps, which only its flow orders (``receive`` and ``finish`` have
#: namesakes on other machines; the rest are the server machine's own).
STEPS = {
    "start_key_exchange",
    "close_key_exchange",
    "start_round",
    "close_collection",
    "close_views",
    "sum_uploads",
    "retry_recovery",
    "reveal_requests",
    "close_disputes",
}
ORDERING = FLOW | STEPS


def _callers() -> dict[str, set[str]]:
    """Module -> the ordering calls it makes (on another object than itself), over the
    product and the simulations."""
    found: dict[str, set[str]] = {}
    for pkg in ("coded_fl", "strategies", "clients", "coded_fl_flower", "simulations"):
        for path in (ROOT / pkg).rglob("*.py"):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                # a call or a bound method handed on (the driver times its calls)
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr in ORDERING
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self")
                ):
                    found.setdefault(str(path.relative_to(ROOT)), set()).add(node.attr)
    return found


def test_only_the_protocol_driver_drives_the_server_machine_and_only_through_its_flow():
    # the order of the steps is the machine's (next_action); no module calls a step itself
    callers = _callers()
    assert callers == {"coded_fl/secagg/driver.py": FLOW}, callers


@pytest.mark.parametrize("module", ["driver", "transport", "replies"])
def test_the_core_driver_knows_nothing_of_flower(module: str):
    tree = ast.parse((ROOT / f"coded_fl/secagg/{module}.py").read_text())
    imported = {
        (n.module or "") if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    assert not any(m.split(".")[0] in ("flwr", "strategies", "clients") for m in imported)


CFG = ProtocolConfig(
    num_silos=5,
    num_stragglers=1,
    privacy_threshold=1,
    vector_length=16,
    run_id="driver",
    extra_replies=1,
)


@pytest.mark.parametrize(("extra", "used"), [(1.0, 4), (3.0, 5)])
def test_the_extra_wait_runs_on_the_transport_clock(extra: float, used: int):
    # four uploads at once, the fifth after 2 virtual seconds: an extra wait of 1 s closes
    # without it (and refuses it as late), one of 3 s takes it and checks the replicas
    h = Harness(CFG, seed=3)
    h.setup()
    out = h.run_round(1, behaviour={4: Silo(delay=2.0)}, waits=Waits(extra=extra))
    res = out.result
    assert isinstance(res, RoundResult), res
    assert len(res.survivors) == used
    assert torch.equal(CFG.field.to_signed(res.aggregate), h.expected_total(1))
    late = [why for silo, why in out.refused if silo == 4]
    assert bool(late) == (used == 4)


def test_the_round_deadline_runs_on_the_transport_clock():
    # two silos slower than the round's deadline: n - s uploads cannot come in time
    h = Harness(CFG, seed=3)
    h.setup()
    slow = {3: Silo(delay=9.0), 4: Silo(delay=9.0)}
    out = h.run_round(1, behaviour=slow, waits=Waits(round=5.0))
    assert not isinstance(out.result, RoundResult)
    assert "3" in out.result.reason or "upload" in out.result.reason
    # the machine is ready for the next round, which completes
    nxt = h.run_round(2)
    assert isinstance(nxt.result, RoundResult)


def test_a_reply_from_another_silo_or_of_another_type_is_that_silos_failure():
    h = Harness(CFG, seed=3)
    h.setup()
    notes, errors = SiloNotes(), {}
    upload_like = Refusal(digest=CFG.digest, round=1, sender=2, recipient=SERVER)
    # silo 1's node answering as silo 2: refused, nothing noted for either
    assert not take(h.server, notes, Reply(1, upload_like), Upload, errors)
    assert "as silo 2" in errors[1] and not notes.needs_keys
    # the right silo: a NEEDS_KEYS refusal marks it for a rekey
    keys = Refusal(digest=CFG.digest, round=1, sender=2, recipient=SERVER)
    assert keys.code == RefusalCode.NEEDS_KEYS
    assert not take(h.server, notes, Reply(2, keys), Upload, errors)
    assert notes.needs_keys == {2}
    # a transport failure is recorded as it came
    assert not take(h.server, notes, Reply(3, error="node lost"), Upload, errors)
    assert errors[3] == "node lost"
