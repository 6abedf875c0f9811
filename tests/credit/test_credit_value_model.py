"""The built-in logistic prefix value model: fits a separable toy set, saves as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajlake.credit import value_source
from trajlake.credit._types import TrajectoryTurns, Turn
from trajlake.credit.value_model import PrefixModelValues
from trajlake.errors import TrajlakeError


def toy(tid: str, success: bool) -> TrajectoryTurns:
    """Successes never error and edit; failures error on every turn and only look around."""
    turns = [
        Turn(
            tid,
            "main",
            t,
            'bash({"command": "python -m pytest"})' if success else 'bash({"command": "ls"})',
            ("str_replace_editor",) if success else ("bash",),
            not success,
            5,
        )
        for t in range(3)
    ]
    return TrajectoryTurns(tid, "task", 1.0 if success else 0.0, "main", turns)


def test_fits_a_separable_toy_set(tmp_path: Path) -> None:
    trajs = [toy(f"s{i}", True) for i in range(6)] + [toy(f"f{i}", False) for i in range(6)]
    model = PrefixModelValues().fit(trajs)
    assert model.feature_names[:5] == ["turn", "budget_fraction", "errors", "edits", "ran_tests"]
    for traj in trajs:
        curve = model.predict(traj)
        assert curve[0] == pytest.approx(0.5, abs=0.05)  # h_0 carries no information
        for p in curve[1:]:
            assert (p > 0.8) if traj.outcome == 1.0 else (p < 0.2)
    values = model.values([*trajs[:1], TrajectoryTurns("u", "task", None, "main", trajs[0].turns)])
    assert values["s0"][-1] == 1.0
    assert values["u"][-1] > 0.9  # no outcome: the model's own estimate

    path = tmp_path / "model.json"
    model.save(path)
    assert json.loads(path.read_text())["format"] == "trajlake.prefix-logreg/1"
    loaded = value_source(f"value-model:{path}")
    assert isinstance(loaded, PrefixModelValues)
    assert loaded.predict(trajs[7]) == pytest.approx(model.predict(trajs[7]), abs=1e-12)


def test_builtin_fits_itself_and_errors() -> None:
    trajs = [toy("s", True), toy("f", False)]
    values = PrefixModelValues().values(trajs)
    assert values["s"][1] > values["f"][1]
    with pytest.raises(TrajlakeError, match="outcomes"):
        PrefixModelValues().fit([TrajectoryTurns("u", None, None)])
    with pytest.raises(TrajlakeError, match="not fitted"):
        PrefixModelValues().predict(trajs[0])


def test_load_rejects_other_files(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{}")
    with pytest.raises(TrajlakeError, match="not a trajlake"):
        PrefixModelValues.load(path)
    with pytest.raises(TrajlakeError, match="cannot read"):
        PrefixModelValues.load(tmp_path / "missing.json")
