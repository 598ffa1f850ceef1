"""A silo's own privacy budget: the noised rounds its data was in, composed across runs.

The server's account (the round line's epsilon) is the server's word. A server that deviates can
ask for as many noised rounds as it likes, each in a fresh session if the silos count per
session: averaging many noisy sums removes the noise. The silo therefore keeps its own ledger,
in a file beside its other state, across every run and session on the node: the RDP of every
noised release its partitions were in, summed per order (:data:`coded_fl.dp.accounting.ORDERS`),
and it refuses an upload whose release would take the composed epsilon at *its own* delta beyond
its budget (``ClientPolicy(max_epsilon=...)``; the run's ``delta`` is the server's setting and
could be chosen to make epsilon look small, so the ledger never uses it).

The charge is written before the upload leaves: a silo that crashes between the two has spent
the release without sending it (the ledger errs on the private side, never the other).

>>> import tempfile, pathlib
>>> from coded_fl.dp import DistributedDP
>>> plan = DistributedDP(noise_multiplier=5.0, clip=1.0).plan(
...     d=100, partitions=6, groups=3, colluders=1, rounds=1, modulus=2**31 - 1)
>>> ledger = PrivacyLedger(pathlib.Path(tempfile.mkdtemp()) / "ledger.json")
>>> first = ledger.charge(plan, delta=1e-5, budget=10.0)
>>> second = ledger.charge(plan, delta=1e-5, budget=10.0)
>>> 0 < first < second <= 10.0, ledger.releases
(True, 2)
"""

from __future__ import annotations

import fcntl
import json
import math
import os
from pathlib import Path

import numpy as np
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

from coded_fl.dp.accounting import ORDERS, skellam_rdp
from coded_fl.dp.settings import DPPlan
from coded_fl.errors import ConfigurationError

__all__ = ["PrivacyBudgetError", "PrivacyLedger"]


class PrivacyBudgetError(ConfigurationError):
    """The release would take the silo's composed epsilon beyond its budget (a setting of the
    silo: the server's round is refused as misconfigured, nothing is uploaded)."""


class PrivacyLedger:
    """The RDP a node's data has spent, per order, kept in one JSON file (public numbers only:
    no key, no data).

    Parameters
    ----------
    path
        The ledger's file (created with its folder on the first charge).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _read(self) -> tuple[np.ndarray, int]:
        try:
            raw = json.loads(self.path.read_text())
            if [float(a) for a in raw["orders"]] != list(ORDERS):
                raise ValueError("other orders")
            rdp = np.asarray([float(x) for x in raw["rdp"]], dtype=np.float64)
            if rdp.shape != (len(ORDERS),) or not np.all(np.isfinite(rdp)) or np.any(rdp < 0):
                raise ValueError("bad values")
            return rdp, int(raw["releases"])
        except FileNotFoundError:
            return np.zeros(len(ORDERS)), 0
        except (OSError, ValueError, TypeError, KeyError) as exc:
            # never read an unreadable ledger as "nothing spent"
            raise ConfigurationError(
                f"the privacy ledger {self.path} cannot be read ({type(exc).__name__}): "
                "restore it, or remove it only if this node's data was never released"
            ) from None

    @property
    def releases(self) -> int:
        """The noised releases charged so far."""
        return self._read()[1]

    def epsilon(self, delta: float) -> float:
        """The composed epsilon at ``delta`` (0 before any release).

        Parameters
        ----------
        delta
            The silo's delta.

        Returns
        -------
        float
        """
        return _epsilon(*self._read(), delta)

    def charge(self, plan: DPPlan, *, delta: float, budget: float | None) -> float:
        """Charge one release of ``plan``'s mechanism, or refuse it if it would exceed
        ``budget`` (nothing is charged then).

        Parameters
        ----------
        plan
            The run's plan (its mu, l2 and l1: what the silo derived from the configuration).
        delta
            The silo's delta for the budget.
        budget
            The largest composed epsilon allowed; None: no limit (still recorded).

        Returns
        -------
        float
            The composed epsilon after this release.

        Raises
        ------
        PrivacyBudgetError
            If the release would exceed ``budget``.
        ConfigurationError
            If the ledger cannot be read or written.
        """
        step = skellam_rdp(ORDERS, l2=plan.l2, l1=plan.l1, mu=plan.mu)
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(self.path.with_suffix(".lock"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                rdp, n = self._read()
                after = rdp + step
                eps = _epsilon(after, n + 1, delta)
                if budget is not None and not eps <= budget:
                    spent = _epsilon(rdp, n, delta)
                    raise PrivacyBudgetError(
                        f"this silo's privacy budget max_epsilon={budget:g} (delta={delta:g}) "
                        f"would be exceeded: {n} noised release(s) spent epsilon {spent:.3g}, "
                        f"one more makes {eps:.3g}; raise node config codedfl.max-epsilon, or "
                        "ask for more noise (DistributedDP(noise_multiplier=...))"
                    )
                tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(
                    json.dumps({"orders": list(ORDERS), "rdp": after.tolist(), "releases": n + 1})
                )
                os.replace(tmp, self.path)
                return eps if math.isfinite(eps) else math.inf
        except OSError as exc:
            raise ConfigurationError(
                f"the privacy ledger {self.path} cannot be written ({type(exc).__name__}): the "
                "release is refused (it could not be counted)"
            ) from None


def _epsilon(rdp: np.ndarray, releases: int, delta: float) -> float:
    """The composed epsilon of ``releases`` releases summing to ``rdp`` (0 for none)."""
    return 0.0 if releases == 0 else float(compute_epsilon(ORDERS, rdp, delta)[0])
