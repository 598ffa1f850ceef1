"""Distributed differential privacy in the finite field (issue 33): the core, framework-free.

Each silo group adds a share of Skellam noise to its partitions' sum before encoding, so the
decoded sum carries the central noise and the server never sees an un-noised sum
(``docs/privacy.md``). The parts:

- :mod:`coded_fl.dp.settings`: :class:`DistributedDP`, the one switch, and its plan for a run;
- :mod:`coded_fl.dp.transform`: clipping, the randomized Hadamard rotation, conditional
  randomized rounding;
- :mod:`coded_fl.dp.noise`: each group's share of the noise and the keyed AES-CTR sampler;
- :mod:`coded_fl.dp.keys`: a group's noise key, from the aligned masks' edge keys at it;
- :mod:`coded_fl.dp.accounting`: the Skellam mechanism's RDP, composed over rounds and converted
  with Google's ``dp-accounting``;
- :mod:`coded_fl.dp.pipeline`: one round on integers, end to end (a partition's update
  privatized, a group's noisy sum, the server's release), with a rotation that keeps d, and
  the pieces the machines call (the round's rotation seed, a partition's clipped and rotated
  update, a group's noise share);
- :mod:`coded_fl.dp.protocol`: what ``ProtocolConfig(dp=...)`` implies (the quantization, the
  plan, the refusals);
- :mod:`coded_fl.dp.ledger`: a silo's own privacy budget, across runs and sessions.

The protocol and the adapters use them through ``ProtocolConfig(dp=...)``,
:mod:`coded_fl.secagg.private` and ``CodedSecAgg(dp=...)`` (``docs/privacy.md``).
"""

try:
    import dp_accounting  # noqa: F401
    import randomgen  # noqa: F401
except ImportError as exc:  # pragma: no cover - the test set-up installs the extra
    raise ImportError(
        f"coded_fl.dp needs the 'dp' extra ({exc.name} is missing): pip install 'coded-fl[dp]'"
    ) from exc

from coded_fl.dp.accounting import calibrate_mu, epsilon_of, rounded_sensitivity, skellam_rdp
from coded_fl.dp.keys import check_noise_keys, noise_key
from coded_fl.dp.ledger import PrivacyBudgetError, PrivacyLedger
from coded_fl.dp.noise import group_mu, skellam
from coded_fl.dp.settings import DistributedDP, DPPlan
from coded_fl.dp.transform import (
    clip_l2,
    rotate,
    round_conditionally,
    round_randomized,
    unrotate,
)

__all__ = [
    "DPPlan",
    "DistributedDP",
    "PrivacyBudgetError",
    "PrivacyLedger",
    "calibrate_mu",
    "check_noise_keys",
    "clip_l2",
    "epsilon_of",
    "group_mu",
    "noise_key",
    "rotate",
    "round_conditionally",
    "round_randomized",
    "rounded_sensitivity",
    "skellam",
    "skellam_rdp",
    "unrotate",
]
