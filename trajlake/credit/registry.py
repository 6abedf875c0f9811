"""The one registry of value sources: every name `run_credit`, `value_source` and the CLI accept
is a `ValueSourceSpec` here, saying how to build the source and what it needs from the lake.

Why a registry: credit sits below the value models, so it may not import them, yet
`value-model:<dir>` and `hindsight:` are credit value sources. Credit's own sources (no torch)
register when `trajlake.credit` is imported (`trajlake.credit.values`); sources that live higher
up register without credit importing them, in one of two ways:

- an entry point in the `trajlake.value_sources` group (pyproject.toml), named like the source
  (`hindsight:`) and pointing at a `ValueSourceSpec` (or a list of them). Entry points are
  loaded on the first lookup of a name no registered spec accepts, so `import trajlake.credit`
  never imports torch, transformers or the value package;
- `register_value_source(spec)` at run time (a plugin, a notebook, a test).

This module imports nothing of credit but the shapes (`_types`), so every source module can
import it without a cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from trajlake.credit._types import ValueSource

__all__ = [
    "ENTRY_POINT_GROUP",
    "ValueSourceSpec",
    "register_value_source",
    "value_source",
    "value_source_names",
    "value_source_spec",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "trajlake.value_sources"
"""The entry-point group value sources outside credit register under."""


@dataclass(frozen=True)
class ValueSourceSpec:
    """How to build one value source, and what it needs from the lake.

    A `name` ending in ':' is a family that takes a target after the colon (`ensemble:`,
    `hindsight:`); `accepts` narrows which targets it handles, so two specs can share a family
    (`value-model:` takes JSON files in credit and model directories in value).
    """

    name: str
    """The exact name (`outcome`), or a family prefix ending in ':' (`hindsight:`)."""
    build: Callable[..., ValueSource]
    """Called as `build(name, **options)` with the full name asked for."""
    usage: str = ""
    """How the name is listed (`value-model:<path.json|builtin>`); `name` when empty."""
    reads_observations: bool = False
    """It reads the turns' observations or messages: `run_credit` passes `lake=` and `at=`."""
    needs_lake: bool = False
    """It cannot work without a lake (the judge caches its calls there)."""
    leaks_outcome: bool = False
    """Its values before s_T contain the trajectory's own outcome (an ensemble warns)."""
    accepts: Callable[[str], bool] | None = None
    """For a family: whether it handles this target (the text after the prefix)."""

    def matches(self, name: str) -> bool:
        """Whether this spec builds `name`."""
        if not self.name.endswith(":"):
            return name == self.name
        if not name.startswith(self.name):
            return False
        return self.accepts is None or self.accepts(name.removeprefix(self.name))


_specs: list[ValueSourceSpec] = []
_loaded_entry_points: set[str] = set()


def register_value_source(spec: ValueSourceSpec) -> ValueSourceSpec:
    """Add `spec` to the registry; a later spec for a name wins over an earlier one.

    Returns the spec, so a module can keep it (`SPEC = register_value_source(...)`).
    """
    if not spec.name or spec.name != spec.name.strip():
        raise ValueError(f"a value source needs a name without surrounding blanks: {spec.name!r}")
    _specs.append(spec)
    return spec


def _find(name: str) -> ValueSourceSpec | None:
    """The latest registered spec that builds `name` (exact names before families)."""
    matching = [s for s in _specs if s.matches(name)]
    exact = [s for s in matching if not s.name.endswith(":")]
    if exact:
        return exact[-1]
    # The longest family wins; among equally long ones, the latest registered.
    return max(reversed(matching), key=lambda s: len(s.name)) if matching else None


def _entry_point_applies(entry: str, name: str | None) -> bool:
    return name is None or entry == name or (entry.endswith(":") and name.startswith(entry))


def _specs_of(target: Any) -> Iterable[Any]:
    """What an entry point gives: one spec, or a list or tuple of them."""
    return target if isinstance(target, list | tuple) else [target]


def _load_entry_points(name: str | None) -> bool:
    """Register the specs of the not-yet-loaded entry points that may build `name` (all of
    them for None)."""
    loaded = False
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in _loaded_entry_points or not _entry_point_applies(entry.name, name):
            continue
        _loaded_entry_points.add(entry.name)
        for spec in _specs_of(entry.load()):
            if not isinstance(spec, ValueSourceSpec):
                raise TypeError(
                    f"entry point {entry.name!r} ({entry.value}) in {ENTRY_POINT_GROUP} gives "
                    f"{type(spec).__name__}, not a ValueSourceSpec"
                )
            if spec not in _specs:
                register_value_source(spec)
        loaded = True
        log.debug("value source entry point %s loaded from %s", entry.name, entry.value)
    return loaded


def value_source_spec(name: str) -> ValueSourceSpec:
    """The spec that builds `name` (entry points are loaded when no registered one does)."""
    spec = _find(name)
    if spec is None and _load_entry_points(name):
        spec = _find(name)
    if spec is None:
        raise ValueError(f"unknown value source {name!r}; known: {', '.join(value_source_names())}")
    return spec


def value_source(name: str, **kw: Any) -> ValueSource:
    """The value source called `name`, built with keyword arguments `kw`.

    Names (`value_source_names()`): `outcome`, `prefix-mc` (min_visits, prior), `group` /
    `group:grpo` (eps, ddof), `group:rloo`, `value-model:builtin` (a `PrefixModelValues`
    fitted on the labelled trajectories it values), `value-model:<path.json>` (a saved one),
    `value-model:<dir>` (a neural prefix-value model; needs `lake` and `at`), `judge`,
    `judge:rubric` (rubric=<file>), `crossfit:text(-td)(-task)`, `anchor`, `progress(-td)`,
    `ensemble:<a>+<b>+...` (folds, seed, component_options) and `hindsight:<model|dir|fit>`
    (causal-LM hindsight log-ratios; fit, folds, beta, max_tokens, device, …), plus whatever
    plugins register.
    """
    return value_source_spec(name).build(name, **kw)


def value_source_names() -> list[str]:
    """The names the registry knows, as listed to users (loading every entry point)."""
    _load_entry_points(None)
    names: list[str] = []
    for spec in _specs:
        shown = spec.usage or spec.name
        if shown not in names:
            names.append(shown)
    return names
