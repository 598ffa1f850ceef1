"""Fixtures of the adversarial-server tests.

``_task_identity`` (autouse where it is defined) gives Flower's ``Message()`` the task identity
its runtime would set; imported here it applies to every test of this package.
"""

from __future__ import annotations

import pytest

from tests.adversarial.harness import ServerView
from tests.unit.test_strategy_faults import _task_identity  # noqa: F401


@pytest.fixture
def server_view(monkeypatch: pytest.MonkeyPatch) -> ServerView:
    """What the real server machine unmasks in every round it decodes (see :class:`ServerView`)."""
    view = ServerView()
    view.install(monkeypatch)
    return view
