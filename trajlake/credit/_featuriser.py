"""The text featuriser of the cross-fitted prefix value models (`crossfit:*`, `progress*`): turns
and observations → the sparse `PrefixDesign` (hashed n-gram blocks plus a few scalars).

It has a module of its own so that `crossfit` (which fits on the design) and `_featurise_pool`
(which builds it over worker processes) both import it from below instead of from each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from trajlake._text_hashing import NgramHasher, buckets
from trajlake.credit._sparse_logit import N_SCALARS, Floats, Ints, PrefixDesign
from trajlake.credit._text_features import Key, Observation, turn_words
from trajlake.credit._types import TrajectoryTurns

_SEED_A = 0x51A7_E0F1
_SEED_B = 0x2B1D_C0DE


@dataclass
class TextFeaturiser:
    """Builds the `PrefixDesign` of trajectories from their turns and observations."""

    n_buckets: int
    budget: int
    observations: Mapping[Key, Observation]
    hasher: NgramHasher
    actions: dict[tuple[str, tuple[str, ...]], list[list[str]]] = field(default_factory=dict)

    def design(self, trajectories: Sequence[TrajectoryTurns]) -> PrefixDesign:
        """Rows s_0 … s_T of each trajectory, in order."""
        lengths = np.asarray([len(t.turns) + 1 for t in trajectories], dtype=np.int64)
        row_start = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        fields, traj, pos, failed = [], [], [], []
        for i, t in enumerate(trajectories):
            for u, turn in enumerate(t.turns):
                obs = self.observations.get((t.trajectory_id, t.thread, turn.turn))
                fields.append(turn_words(turn, obs, cache=self.actions))
                traj.append(i)
                pos.append(u)
                failed.append(turn.is_error or (obs is not None and obs.failed))
        turn_traj = np.asarray(traj, dtype=np.int64)
        turn_pos = np.asarray(pos, dtype=np.int64)
        turn_row = row_start[turn_traj] + turn_pos + 1 if len(traj) else turn_traj
        hashes, owner = self.hasher.hash_turns(fields)
        b_index, b_sign = buckets(hashes, self.n_buckets, _SEED_B)
        # Block A keeps each n-gram once per trajectory, at its first turn.
        order = np.lexsort((turn_pos[owner], hashes, turn_traj[owner]))
        h, who = hashes[order], turn_traj[owner][order]
        first = np.ones(len(h), dtype=bool)
        first[1:] = (h[1:] != h[:-1]) | (who[1:] != who[:-1])
        a_index, a_sign = buckets(h[first], self.n_buckets, _SEED_A)
        scalars = self._scalars(lengths, row_start, turn_row, np.asarray(failed, dtype=bool))
        return PrefixDesign(
            self.n_buckets,
            self.n_buckets,
            row_start,
            scalars,
            a_index,
            a_sign,
            turn_row[owner[order][first]],
            b_index,
            b_sign,
            turn_row[owner],
        )

    def _scalars(self, lengths: Ints, row_start: Ints, turn_row: Ints, failed: Ints) -> Floats:
        n = int(row_start[-1])
        t = np.arange(n) - np.repeat(row_start[:-1], lengths)
        last = np.zeros(n)
        last[turn_row[failed.astype(bool)]] = 1.0
        so_far = np.cumsum(last)
        so_far -= np.repeat(so_far[row_start[:-1]], lengths)
        out = np.empty((n, N_SCALARS))
        out[:, 0] = np.minimum(t / max(self.budget, 1), 2.0)
        out[:, 1] = np.log1p(t)
        out[:, 2] = so_far / np.maximum(t, 1)
        out[:, 3] = last
        return out
