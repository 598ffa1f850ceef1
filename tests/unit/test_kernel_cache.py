"""The kernels' numba cache is stamped with the whole package: a kernel that inlines a helper
from a sibling module (``reduction``) recompiles when only that sibling changes."""

from __future__ import annotations

from pathlib import Path

from coded_fl.kernels import cache, elementwise


def test_the_stamp_changes_with_any_module_of_the_folder(tmp_path: Path) -> None:
    (tmp_path / "kernel.py").write_text("def f(): return helper()\n")
    (tmp_path / "helper.py").write_text("def helper(): return 1\n")
    before = cache._package_stamp.__wrapped__(str(tmp_path))
    assert cache._package_stamp.__wrapped__(str(tmp_path)) == before
    (tmp_path / "helper.py").write_text("def helper(): return 2\n")
    assert cache._package_stamp.__wrapped__(str(tmp_path)) != before


def test_every_kernel_is_stamped_with_its_package() -> None:
    folder = str(Path(elementwise.__file__).parent)
    stamp = elementwise.add._cache._cache_file._source_stamp
    assert stamp == cache._package_stamp(folder)
