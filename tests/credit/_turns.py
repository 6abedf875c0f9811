"""Hand-built trajectories for the credit sources' unit tests."""

from __future__ import annotations

from trajlake.credit import TrajectoryTurns, Turn
from trajlake.credit._text_features import Key, Observation


def traj(
    tid: str,
    task: str | None,
    outcome: float | None,
    observations: list[str],
    obs: dict[Key, Observation],
) -> TrajectoryTurns:
    """A trajectory of identical `run_tests` turns whose observations are the given texts
    (added to `obs`, keyed as the lake's observations are)."""
    t = TrajectoryTurns(tid, task, outcome)
    for u, text in enumerate(observations):
        t.turns.append(
            Turn(tid, "main", u, 'run_tests({"command": "pytest"})', ("run_tests",), False, None)
        )
        obs[(tid, "main", u)] = Observation(text, False)
    return t
