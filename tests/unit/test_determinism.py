"""coded_fl.determinism: settings applied inside, restored on exit (also after an error)."""

from __future__ import annotations

import os

import pytest
import torch

from coded_fl import ConfigurationError, deterministic_torch, torch_threads
from coded_fl.determinism import CUBLAS_WORKSPACE


def _settings() -> tuple[object, ...]:
    return (
        torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        getattr(torch.backends.mkldnn, "deterministic", None),
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    )


@pytest.fixture(autouse=True)
def _restore_torch() -> object:
    before = _settings()
    yield
    torch.set_num_threads(before[0])  # type: ignore[arg-type]
    torch.use_deterministic_algorithms(before[1], warn_only=before[2])  # type: ignore[arg-type]
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[3], before[4]  # type: ignore[assignment]


def test_applied_inside_and_restored_after() -> None:
    torch.set_num_threads(2)
    torch.backends.cudnn.benchmark = True
    before = _settings()
    with deterministic_torch(threads=1):
        assert torch.get_num_threads() == 1
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        if hasattr(torch.backends.mkldnn, "deterministic"):
            assert torch.backends.mkldnn.deterministic
        if torch.cuda.is_available() and before[-1] is None:
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE
    assert _settings() == before


def test_restored_after_an_exception_and_when_nested() -> None:
    torch.set_num_threads(2)
    before = _settings()
    with pytest.raises(RuntimeError, match="boom"), deterministic_torch(threads=1, warn_only=True):
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        with deterministic_torch(threads=None):
            assert torch.get_num_threads() == 1  # None: left as the outer context set it
            assert not torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()  # inner restored outer's
        raise RuntimeError("boom")
    assert _settings() == before


def test_as_a_decorator() -> None:
    torch.set_num_threads(2)

    @deterministic_torch(threads=1)
    def probe() -> tuple[int, bool]:
        return torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()

    assert probe() == (1, True)
    assert probe() == (1, True)  # a fresh context per call
    assert torch.get_num_threads() == 2
    assert not torch.are_deterministic_algorithms_enabled()


def test_same_result_twice() -> None:
    net = torch.nn.Linear(8, 3)
    x = torch.randn(16, 8)
    with deterministic_torch():
        a = net(x).sum()
        a.backward()
        g1 = net.weight.grad.clone()  # type: ignore[union-attr]
        net.zero_grad()
        net(x).sum().backward()
        assert torch.equal(g1, net.weight.grad)  # type: ignore[arg-type]


def test_torch_threads() -> None:
    torch.set_num_threads(1)
    with torch_threads(2):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == 1
    with torch_threads(None):
        assert torch.get_num_threads() == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_thread_count_is_refused(bad: object) -> None:
    for guard in (deterministic_torch, torch_threads):
        with (
            pytest.raises(ConfigurationError, match="threads must be an int >= 1"),
            guard(bad),  # type: ignore[operator]
        ):
            pass
