"""The value-source registry: runtime registration, families that share a prefix, what a spec
tells `run_credit` and ensembles, entry points loaded on the first unknown name, and credit
importing none of the value models that register from above."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.credit import (
    OutcomeValues,
    TrajectoryTurns,
    ValueSourceSpec,
    register_value_source,
    registry,
    run_credit,
    value_source,
    value_source_names,
    value_source_spec,
)
from trajlake.credit.value_model import PrefixModelValues
from trajlake.sample import sample_trajectories


@pytest.fixture(autouse=True)
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Registrations made by a test stay in that test."""
    monkeypatch.setattr(registry, "_specs", list(registry._specs))
    monkeypatch.setattr(registry, "_loaded_entry_points", set(registry._loaded_entry_points))
    yield


class Fixed:
    """A value source giving every state the same value (0.5), the outcome last."""

    def __init__(self, name: str) -> None:
        self.name = name

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        return {
            t.trajectory_id: [0.5] * len(t.turns) + [float(t.outcome)]
            for t in trajectories
            if t.outcome is not None
        }


def _fixed(name: str, **kw: Any) -> Fixed:
    return Fixed(name)


ENTRY_SPEC = ValueSourceSpec("test-ep:", _fixed, usage="test-ep:<anything>")
NOT_A_SPEC = object()


def test_runtime_registration_builds_by_name_and_the_latest_wins() -> None:
    with pytest.raises(ValueError, match="unknown value source 'test-fixed'"):
        value_source("test-fixed")
    register_value_source(ValueSourceSpec("test-fixed", _fixed))
    assert isinstance(value_source("test-fixed"), Fixed)
    assert "test-fixed" in value_source_names()
    register_value_source(ValueSourceSpec("test-fixed", lambda name, **kw: OutcomeValues()))
    assert isinstance(value_source("test-fixed"), OutcomeValues)
    with pytest.raises(ValueError, match="without surrounding blanks"):
        register_value_source(ValueSourceSpec(" x", _fixed))


def test_a_family_takes_the_targets_it_accepts() -> None:
    register_value_source(ValueSourceSpec("test-fam:", _fixed, accepts=lambda t: t.startswith("a")))
    assert value_source("test-fam:abc").name == "test-fam:abc"
    with pytest.raises(ValueError, match="unknown value source 'test-fam:xyz'"):
        value_source("test-fam:xyz")


def test_value_model_targets_split_between_credit_and_the_value_package(tmp_path: Path) -> None:
    # `value-model:` is two specs: JSON files and `builtin` in credit, directories in value.
    credit_spec = value_source_spec("value-model:model.json")
    assert credit_spec.name == "value-model:" and not credit_spec.reads_observations
    assert value_source_spec("value-model:builtin").leaks_outcome
    assert isinstance(value_source("value-model:builtin"), PrefixModelValues)
    neural = value_source_spec(f"value-model:{tmp_path}")
    from trajlake.value.prefix_source import SPEC

    assert neural is SPEC and neural.reads_observations
    # With both loaded, `builtin` and the empty target (`Path("")` is a directory) stay credit's.
    assert isinstance(value_source("value-model:"), PrefixModelValues)
    assert isinstance(value_source("value-model:builtin"), PrefixModelValues)
    assert value_source_spec("hindsight:fit").reads_observations


def test_entry_points_load_on_the_first_unknown_name(monkeypatch: pytest.MonkeyPatch) -> None:
    group = registry.ENTRY_POINT_GROUP
    eps = [
        EntryPoint("test-ep:", f"{__name__}:ENTRY_SPEC", group),
        EntryPoint("test-bad", f"{__name__}:NOT_A_SPEC", group),
    ]
    monkeypatch.setattr(registry, "entry_points", lambda group: eps)
    assert registry._find("test-ep:one") is None  # not loaded before it is asked for
    assert value_source("test-ep:one").name == "test-ep:one"
    assert value_source_spec("test-ep:two") is ENTRY_SPEC
    with pytest.raises(TypeError, match=r"'test-bad'.*not a ValueSourceSpec"):
        value_source("test-bad")


def test_run_credit_gives_the_lake_to_sources_that_read_it(lake: tl.Lake) -> None:
    lake.write(list(sample_trajectories(4)))
    seen: dict[str, Any] = {}

    def build(name: str, **kw: Any) -> Fixed:
        seen.update(kw)
        return Fixed(name)

    register_value_source(ValueSourceSpec("test-reader", build, reads_observations=True))
    report = run_credit(lake, estimator="test-reader", mask="all")
    assert seen["lake"] is lake and seen["at"] == report.source_snapshot
    seen.clear()
    register_value_source(ValueSourceSpec("test-blind", build))
    run_credit(lake, estimator="test-blind", mask="all")
    assert "lake" not in seen and "at" not in seen


def test_an_ensemble_warns_about_components_that_leak_the_outcome(
    caplog: pytest.LogCaptureFixture,
) -> None:
    register_value_source(ValueSourceSpec("test-leaky", _fixed, leaks_outcome=True))
    with caplog.at_level("WARNING", logger="trajlake.credit.ensemble"):
        value_source("ensemble:test-leaky+prefix-mc")
    assert "'test-leaky' values each trajectory with its own outcome" in caplog.text


def test_credit_imports_no_value_model_until_one_is_named() -> None:
    code = """
import json, sys
import trajlake.credit as credit
before = sorted(m for m in sys.modules if m.startswith(("trajlake.value", "torch", "transformers")))
spec = credit.value_source_spec("hindsight:fit")
after = {m for m in ("trajlake.value.hindsight", "torch", "transformers") if m in sys.modules}
print(json.dumps({"before": before, "after": sorted(after), "names": credit.value_source_names()}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    found = json.loads(out.splitlines()[-1])
    assert found["before"] == []
    # The entry point is loaded by name; the LM code (torch) waits until the source scores.
    assert found["after"] == ["trajlake.value.hindsight"]
    assert "hindsight:<model name|model dir|fit>" in found["names"]
