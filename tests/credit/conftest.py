"""Fixtures of the judge tests (default and rubric prompt alike): a lake of four sample
trajectories, two resolved and two not, and their turns as the credit layer loads them."""

from __future__ import annotations

import pytest
from _judge_stub import N_JUDGED

import trajlake as tl
from trajlake.credit import TrajectoryTurns, load_turns
from trajlake.sample import sample_trajectories


@pytest.fixture
def judged_lake(lake: tl.Lake) -> tl.Lake:
    """`lake` holding `N_JUDGED` sample trajectories (two resolved, two not)."""
    lake.write(list(sample_trajectories(N_JUDGED, start=4)))
    return lake


@pytest.fixture
def judged_turns(judged_lake: tl.Lake) -> list[TrajectoryTurns]:
    """The turns of every trajectory in `judged_lake`, both outcomes present."""
    turns = load_turns(judged_lake)
    stored = judged_lake.sql("SELECT trajectory_id FROM trajectories").rows()
    assert sorted(t.trajectory_id for t in turns) == sorted(tid for (tid,) in stored)
    assert {t.outcome for t in turns} == {0.0, 1.0}
    return turns
