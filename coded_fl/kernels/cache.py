"""Where numba keeps the compiled CPU kernels: one folder for every copy of the source.

numba (``cache=True``) keys a compiled kernel by its name, argument types and a hash of the
source file's content, and by default writes it to ``__pycache__`` beside the module. A Flower
run imports this package from two places: the ClientApps from the project (the editable
install), the ServerApp from the copy Flower unpacks from the app bundle into
``$FLWR_HOME/apps/<hash>/``, a new folder whenever any file changes. That copy starts with an
empty ``__pycache__``, so the server compiled its kernels in round 1 of every first run.

With :data:`ENV` set (``scripts/setup.sh`` and ``scripts/main.sh`` set it to the project's
``.kernel-cache``), every copy reads and writes that one folder. Unset, numba's own locations
apply.

numba stamps a cached kernel with a hash of its own file only, but the kernels call (and
inline) helpers from sibling modules (``reduction``): an edit there would leave the kernels of
the other files compiled against the old helper. So every kernel here is stamped with a hash of
*all* the package's modules instead: an edit to any of them recompiles every kernel (once).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
from pathlib import Path
from typing import Any

from numba.core.caching import (
    CompileResultCacheImpl,
    FunctionCache,
    IndexDataCacheFile,
    InTreeCacheLocator,
)

__all__ = ["ENV", "share_cache"]

#: The environment variable naming the shared cache folder.
ENV = "CODED_FL_KERNEL_CACHE"


class _SharedLocator(InTreeCacheLocator):
    """numba's in-tree locator with the folder :data:`ENV` names (None when it is unset or
    not writable: numba's own locators take over)."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        super().__init__(py_func, py_file)
        self._cache_path = os.path.abspath(os.environ[ENV])

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> _SharedLocator | None:
        if not os.environ.get(ENV):
            return None
        return super().from_function(py_func, py_file)


class _SharedImpl(CompileResultCacheImpl):
    # numba's own attribute, which it reads per class: ours is tried first
    _locator_classes = [_SharedLocator, *CompileResultCacheImpl._locator_classes]  # noqa: RUF012


@functools.cache
def _package_stamp(folder: str) -> str:
    """A hash of every module's name and content in ``folder`` (read once per process)."""
    h = hashlib.sha256()
    for path in sorted(Path(folder).glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


class _SharedCache(FunctionCache):
    _impl_class = _SharedImpl

    def __init__(self, py_func: Any) -> None:
        super().__init__(py_func)
        # numba's index keeps the stamp it was written with and drops a cache whose stamp
        # differs: stamp with the whole package, not the kernel's file alone
        self._cache_file = IndexDataCacheFile(
            cache_path=self._cache_path,
            filename_base=self._impl.filename_base,
            source_stamp=_package_stamp(os.path.dirname(inspect.getfile(py_func))),
        )


def share_cache(*kernels: Any) -> None:
    """Give each ``@njit(cache=True)`` kernel the shared cache (before its first call).

    Parameters
    ----------
    *kernels
        numba dispatchers made with ``@njit(cache=True)``.
    """
    for kernel in kernels:
        kernel._cache = _SharedCache(kernel.py_func)
