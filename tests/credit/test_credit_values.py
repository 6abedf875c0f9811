"""Value sources: outcome broadcast, prefix Monte Carlo, GRPO / RLOO, the registry."""

from __future__ import annotations

import json
import math
import sys

import pytest

from trajlake.credit import (
    GroupValues,
    OutcomeValues,
    PrefixMCValues,
    action_key,
    value_source,
)
from trajlake.credit._types import TrajectoryTurns, Turn
from trajlake.errors import TrajlakeError


def make_traj(
    tid: str, task: str | None, outcome: float | None, actions: list[str], errors: int = 0
) -> TrajectoryTurns:
    """A trajectory whose turns call the tools named in `actions` (`name` or `name:cmd`)."""
    turns = []
    for t, action in enumerate(actions):
        name, _, cmd = action.partition(":")
        args = json.dumps({"command": cmd + " --flag x"} if cmd else {"q": t})
        turns.append(Turn(tid, "main", t, f"thinking\n{name}({args})", (name,), t < errors, 10 + t))
    return TrajectoryTurns(tid, task, outcome, "main", turns)


def test_outcome_values_broadcast_and_skip_unlabelled() -> None:
    trajs = [make_traj("a", "t", 1.0, ["x", "y"]), make_traj("b", "t", None, ["x"])]
    assert OutcomeValues().values(trajs) == {"a": [1.0, 1.0, 1.0]}


def test_action_key_canonicalises_arguments() -> None:
    grep1 = Turn("a", "main", 0, 'bash({"command": "grep -rn foo src"})', ("bash",), False, None)
    grep2 = Turn("b", "main", 0, 'bash({"command": "grep  bar"})', ("bash",), False, None)
    view = Turn(
        "c",
        "main",
        0,
        'str_replace_editor({"command": "view", "path": "/repo/src/a.py"})',
        ("str_replace_editor",),
        False,
        None,
    )
    plain = Turn("d", "main", 0, "just text", (), False, None)
    assert action_key(grep1) == action_key(grep2) == "bash:grep"
    assert action_key(view) == "str_replace_editor:view:a.py"
    assert action_key(plain) == "text"


def test_prefix_mc_with_min_visit_fallback() -> None:
    trajs = [
        make_traj("r1", "t", 1.0, ["A", "B", "C"]),
        make_traj("r2", "t", 0.0, ["A", "B", "D"]),
        make_traj("r3", "t", 1.0, ["A", "E"]),
        make_traj("r4", "t", 0.0, ["F"]),
        make_traj("r5", "t", 0.0, ["F", "G", "H"]),
        make_traj("r6", "u", 1.0, ["A"]),
        make_traj("r7", "t", None, ["A"]),  # unlabelled: neither counted nor valued
    ]
    values = PrefixMCValues(min_visits=2, prior=(1.0, 1.0)).values(trajs)
    root = 3 / 7  # task t: 5 rollouts, 2 successes → (2 + 1) / (5 + 2)
    assert values["r1"] == pytest.approx([root, 3 / 5, 2 / 4, 1.0])
    assert values["r2"] == pytest.approx([root, 3 / 5, 2 / 4, 0.0])
    assert values["r3"] == pytest.approx([root, 3 / 5, 1.0])
    assert values["r4"] == pytest.approx([root, 0.0])
    # [F] has 2 visits, 0 successes → 1/4; [F, G] has 1 visit → falls back to [F].
    assert values["r5"] == pytest.approx([root, 1 / 4, 1 / 4, 0.0])
    assert values["r6"] == pytest.approx([2 / 3, 1.0])
    assert "r7" not in values


def test_prefix_mc_without_smoothing_or_fallback() -> None:
    trajs = [make_traj("a", "t", 1.0, ["A", "B"]), make_traj("b", "t", 0.0, ["A", "C"])]
    values = PrefixMCValues(min_visits=1, prior=(0.0, 0.0)).values(trajs)
    assert values == {"a": [0.5, 0.5, 1.0], "b": [0.5, 0.5, 0.0]}


def four_rollouts(rewards: list[float]) -> list[TrajectoryTurns]:
    return [make_traj(f"r{i}", "t", r, ["A", "B"]) for i, r in enumerate(rewards)]


def test_grpo_on_four_rollouts() -> None:
    adv = GroupValues("grpo", eps=0.0).advantages(four_rollouts([1.0, 0.0, 0.0, 1.0]))
    assert adv == pytest.approx({"r0": 1.0, "r1": -1.0, "r2": -1.0, "r3": 1.0})
    adv = GroupValues("grpo", eps=0.0).advantages(four_rollouts([1.0, 0.0, 0.0, 0.0]))
    s3 = math.sqrt(3)  # mean 1/4, std sqrt(3)/4
    assert adv == pytest.approx({"r0": s3, "r1": -1 / s3, "r2": -1 / s3, "r3": -1 / s3})
    unbiased = GroupValues("grpo", eps=0.0, ddof=1).advantages(four_rollouts([1.0, 0.0, 0.0, 0.0]))
    assert unbiased["r0"] == pytest.approx(0.75 / 0.5)  # std with ddof 1 = 1/2
    same = GroupValues("grpo").advantages(four_rollouts([1.0, 1.0, 1.0, 1.0]))
    assert same == {"r0": 0.0, "r1": 0.0, "r2": 0.0, "r3": 0.0}


def test_rloo_on_four_rollouts() -> None:
    trajs = four_rollouts([1.0, 0.0, 0.0, 0.0])
    source = GroupValues("rloo")
    assert source.advantages(trajs) == pytest.approx(
        {"r0": 1.0, "r1": -1 / 3, "r2": -1 / 3, "r3": -1 / 3}
    )
    values = source.values(trajs)
    assert values["r0"] == pytest.approx([0.0, 0.0, 1.0])
    assert values["r1"] == pytest.approx([1 / 3, 1 / 3, 0.0])
    assert GroupValues("rloo").advantages([make_traj("x", "solo", 1.0, ["A"])]) == {"x": 0.0}


def test_registry() -> None:
    assert isinstance(value_source("outcome"), OutcomeValues)
    mc = value_source("prefix-mc", min_visits=3, prior=[2, 2])
    assert isinstance(mc, PrefixMCValues) and mc.min_visits == 3 and mc.prior == (2.0, 2.0)
    assert value_source("group").name == "group"
    assert value_source("group:rloo").name == "group:rloo"
    assert value_source("value-model:builtin").name == "value-model"
    with pytest.raises(ValueError, match="unknown value source"):
        value_source("nope")


def test_registry_judge_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trajlake.credit.judge", None)  # import fails
    with pytest.raises(TrajlakeError, match="judge"):
        value_source("judge")
