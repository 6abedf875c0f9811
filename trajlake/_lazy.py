"""Names a package exports but imports on first use (PEP 562 module `__getattr__`).

`import trajlake` and the package `__init__` files stay cheap this way: ingest workers import
`trajlake.ingest` modules without paying for the lake layer, and importing one inference module
of `trajlake.value` does not load training code. One helper so the three packages that do this
resolve, cache and list their names the same way.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, names: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`: `names` maps each exported name to the module
    that defines it; a resolved name is stored in `namespace` (the package's globals), so it is
    looked up once."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
