"""Start-up of an ingest parsing process: what it needs before its first task.

Kept free of imports beyond the standard library at module level: it runs before the worker
has loaded any of trajlake, so that what it sets up is in place when the parsing modules arrive.
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class _NoPandas:
    """A meta-path finder refusing pandas in a parsing worker.

    pyarrow imports pandas on its first conversion of a Python list (to check whether the list
    is a pandas object): about half a second of CPU per process, paid by every worker before
    its first chunk. Parsing never hands anything to pandas, so a worker runs without it; an
    import of pandas there fails at once with this message instead.
    """

    def find_spec(
        self,
        name: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not loaded in trajlake's ingest workers")
        return None


# Young objects are collected every this many allocations (CPython's default is 700).
_YOUNG_COLLECTION_ALLOCATIONS = 50_000


def start_worker() -> None:
    """`ProcessPoolExecutor` initializer of parsing workers."""
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())
    _tune_collector()


def _tune_collector() -> None:
    """Make the cyclic garbage collector run rarely in a parsing worker.

    A worker holds a part's records (thousands of dicts and lists per 4 MiB) until they become
    Arrow, and at CPython's default thresholds the collector walks them over and over: about a
    tenth of a worker's CPU on chat files, for nothing, since parsing makes almost no cycles
    (a caught error's traceback). The parsing modules are loaded first and frozen, so no
    collection walks them again; young objects are collected every 50,000 allocations.
    """
    importlib.import_module("trajlake.ingest._isolate")  # what the first task would load
    gc.freeze()
    gc.set_threshold(_YOUNG_COLLECTION_ALLOCATIONS, 20, 100)
