"""Start-up of an ingest parsing process: what it needs before its first task.

Kept free of imports beyond the standard library: it runs before the worker has loaded any
of trajlake, so that what it sets up is in place when the parsing modules arrive.
"""

from __future__ import annotations

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


def start_worker() -> None:
    """`ProcessPoolExecutor` initializer of parsing workers."""
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())
