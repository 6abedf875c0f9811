"""`anchor` — state-anchored values across the rollouts of one task (GiGPO-style), no model.

The state after a turn is its observation, normalised (numbers, paths, hashes, whitespace and
runs of punctuation stripped), so the same tool output seen by several rollouts of a task is
one anchor state. V(s) is the mean outcome of the task's rollouts that passed through s,
shrunk toward the task's mean outcome, and TD credit is the change in anchored value.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from trajlake._text_hashing import clip, normalise
from trajlake.credit._text_features import Key, Observation, action_words, read_observations
from trajlake.credit._types import TrajectoryTurns, Turn

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

log = logging.getLogger(__name__)


def state_key(turn: Turn, observation: Observation | None) -> str:
    """The anchor of the state a turn leads to: a digest of its normalised observation (and
    failure status); of its normalised action when nothing came back."""
    if observation is not None and observation.text.strip():
        failed = turn.is_error or observation.failed
        text = ("failed:" if failed else "ok:") + normalise(clip(observation.text))
    else:
        text = "action:" + " ".join(action_words(turn))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


class AnchoredValues:
    """V(s_t) from the outcomes of the task's rollouts that reached the same anchor state.

    For rollout i of a task with n labelled rollouts and mean outcome μ: V(s_0) = μ; for
    0 < t < T, V(s_t) = (S + m·μ) / (N + m), where N rollouts of the task (each counted once)
    reached the anchor state of s_t, S of them successful, and m = `prior`; V(s_T) = the
    outcome. With `leave_one_out`, rollout i's own outcome is left out of S, N and μ (its
    values then never contain its own outcome before s_T). A task with one rollout gets its
    mean everywhere (its credit is 0), and a warning says how many tasks did.
    """

    name = "anchor"

    def __init__(
        self,
        prior: float = 2.0,
        *,
        leave_one_out: bool = False,
        lake: LakeStore | None = None,
        at: SnapshotRef = None,
        observations: Mapping[Key, Observation] | None = None,
    ) -> None:
        if prior < 0:
            raise ValueError(f"prior must be >= 0, got {prior}")
        self.prior = float(prior)
        self.leave_one_out = leave_one_out
        self.lake, self.at, self.observations = lake, at, observations
        self.single_rollout_tasks = 0
        """Tasks of the last `values()` call that had only one labelled rollout."""

    def _observations(self, trajs: Sequence[TrajectoryTurns]) -> Mapping[Key, Observation]:
        if self.observations is not None:
            return self.observations
        if self.lake is None:
            log.info("anchor: no lake given, states are anchored on normalised actions")
            return {}
        return read_observations(self.lake, self.at, trajs)

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """Anchored V(s_0) … V(s_T) of the labelled trajectories."""
        labelled = [t for t in trajectories if t.outcome is not None]
        observations = self._observations(labelled)
        groups: dict[str, list[TrajectoryTurns]] = defaultdict(list)
        for t in labelled:
            groups[t.task_id if t.task_id is not None else "traj:" + t.trajectory_id].append(t)
        out: dict[str, list[float]] = {}
        self.single_rollout_tasks = sum(1 for g in groups.values() if len(g) == 1)
        for group in groups.values():
            keys = [
                [
                    state_key(turn, observations.get((t.trajectory_id, t.thread, turn.turn)))
                    for turn in t.turns
                ]
                for t in group
            ]
            out.update(self._task_values(group, keys))
        if self.single_rollout_tasks:
            log.warning(
                "anchor: %d of %d tasks have a single labelled rollout; their values are the "
                "task mean (their outcome), so their credit is 0 (anchoring needs several "
                "rollouts per task sharing a task_id)",
                self.single_rollout_tasks,
                len(groups),
            )
        return out

    def _task_values(
        self, group: Sequence[TrajectoryTurns], keys: Sequence[Sequence[str]]
    ) -> dict[str, list[float]]:
        outcomes = [float(t.outcome) for t in group]  # type: ignore[arg-type]
        total, n = sum(outcomes), len(outcomes)
        visits: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for states, r in zip(keys, outcomes, strict=True):
            for key in set(states):
                visits[key][0] += 1
                visits[key][1] += r
        m = self.prior
        out: dict[str, list[float]] = {}
        for t, states, r in zip(group, keys, outcomes, strict=True):
            own = 1.0 if self.leave_one_out and n > 1 else 0.0
            mean = (total - own * r) / (n - own)
            curve = [mean]
            for key in states[:-1]:
                count, wins = visits[key]
                count, wins = count - own, wins - own * r
                curve.append((wins + m * mean) / (count + m) if count + m > 0 else mean)
            curve.append(r)
            out[t.trajectory_id] = curve if t.turns else [r]
        return out
