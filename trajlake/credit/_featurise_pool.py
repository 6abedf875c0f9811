"""Featurising for the text value sources in worker processes: the serial design, split by
trajectory, built in parallel and joined back in order (identical arrays, element for element).

A design's rows and entries are grouped by trajectory in input order (block A sorted by
trajectory, then hash; block B by turn, then hash; scalars per row), so designing contiguous
slices and concatenating them, with row numbers shifted, gives exactly the serial result.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import multiprocessing
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import fields

import numpy as np

from trajlake._text_hashing import NgramHasher
from trajlake.credit._featuriser import TextFeaturiser
from trajlake.credit._sparse_logit import PrefixDesign
from trajlake.credit._text_features import Key, Observation
from trajlake.credit._types import TrajectoryTurns

log = logging.getLogger(__name__)

WORKERS_ENV = "TRAJLAKE_CREDIT_WORKERS"
"""Environment variable capping the featurising processes (1 = serial)."""

MIN_PARALLEL = 1_000
"""Below this many trajectories (≈ 5 s of serial featurising at 40 turns) starting and feeding
the workers costs more than it saves."""

_CHECK_SAMPLE = 8
"""Trajectories designed whole and in two halves to check that slices join exactly."""

_lock = threading.Lock()
_executor: ProcessPoolExecutor | None = None
_executor_workers = 0


def usable_workers() -> int:
    """Featurising processes to use: the cores this process may run on, capped by the
    `TRAJLAKE_CREDIT_WORKERS` environment variable."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = cores or 1
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if raw:
        try:
            cap = int(raw)
        except ValueError as e:
            raise ValueError(f"{WORKERS_ENV} must be a whole number, got {raw!r}") from e
        if cap < 1:
            raise ValueError(f"{WORKERS_ENV} must be >= 1, got {cap}")
        workers = min(workers, cap)
    return workers


def _pool(workers: int) -> ProcessPoolExecutor:
    """One reusable pool (a values() call designs several chunks; spawning per chunk would
    cost a second each). Spawn, not fork: the parent holds DuckDB and delta-rs threads."""
    global _executor, _executor_workers
    if _executor is None or _executor_workers != workers:
        if _executor is not None:
            _executor.shutdown(wait=True)
        _executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        _executor_workers = workers
    return _executor


def shutdown_pool() -> None:
    """Stop the featurising processes (they are started again when next needed)."""
    global _executor, _executor_workers
    with _lock:
        if _executor is not None:
            _executor.shutdown(wait=True)
        _executor, _executor_workers = None, 0


atexit.register(shutdown_pool)


def _design_piece(featuriser: TextFeaturiser, trajectories: list[TrajectoryTurns]) -> PrefixDesign:
    return featuriser.design(trajectories)


def join_designs(pieces: Sequence[PrefixDesign]) -> PrefixDesign:
    """The design of the concatenated trajectories of `pieces` (in order)."""
    offsets = np.cumsum([0, *(p.n_rows for p in pieces)]).astype(np.int64)
    row_start = np.concatenate(
        [*(p.row_start[:-1] + off for p, off in zip(pieces, offsets, strict=False)), offsets[-1:]]
    ).astype(np.int64)

    def rows(name: str) -> np.ndarray:
        parts = [getattr(p, name) + off for p, off in zip(pieces, offsets, strict=False)]
        return np.concatenate(parts).astype(np.int64)

    first = pieces[0]
    return PrefixDesign(
        first.a_size,
        first.b_size,
        row_start,
        np.concatenate([p.scalars for p in pieces]),
        np.concatenate([p.a_index for p in pieces]).astype(np.int64),
        np.concatenate([p.a_sign for p in pieces]),
        rows("a_row"),
        np.concatenate([p.b_index for p in pieces]).astype(np.int64),
        np.concatenate([p.b_sign for p in pieces]),
        rows("b_row"),
    )


def same_design(a: PrefixDesign, b: PrefixDesign) -> bool:
    """Whether two designs hold the same arrays (dtype and every element, in order)."""
    if (a.a_size, a.b_size) != (b.a_size, b.b_size):
        return False
    return all(
        x.dtype == y.dtype and np.array_equal(x, y)
        for x, y in ((getattr(a, f.name), getattr(b, f.name)) for f in fields(a))
        if isinstance(x, np.ndarray)
    )


class PooledFeaturiser(TextFeaturiser):
    """A `TextFeaturiser` whose `design` splits large inputs over worker processes.

    `workers` (default: `usable_workers()`) processes each design a contiguous slice with a
    copy of the featuriser that holds only its slice's observations; inputs under
    `min_trajectories` trajectories, one worker, or a pool that fails are designed serially.
    """

    workers: int | None = None
    min_trajectories: int = MIN_PARALLEL
    _split_ok: bool | None = None

    def design(self, trajectories: Sequence[TrajectoryTurns]) -> PrefixDesign:
        """Rows s_0 … s_T of each trajectory, in order (the serial design, built in parallel)."""
        workers = self.workers if self.workers is not None else usable_workers()
        n = len(trajectories)
        if workers < 2 or n < max(self.min_trajectories, 2) or not self._splits(trajectories):
            return super().design(trajectories)
        # Two slices per worker even out slices of unequal cost without much per-slice overhead.
        n_pieces = min(2 * workers, n)
        bounds = np.linspace(0, n, n_pieces + 1).round().astype(int)
        slices = [list(trajectories[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
        try:
            with _lock:
                pool = _pool(workers)
                futures = [pool.submit(_design_piece, self._for(piece), piece) for piece in slices]
                pieces = [f.result() for f in futures]
        except (BrokenProcessPool, OSError) as e:
            log.warning("featurising workers failed (%s); featurising in this process", e)
            shutdown_pool()
            return super().design(trajectories)
        return join_designs(pieces)

    def _splits(self, trajectories: Sequence[TrajectoryTurns]) -> bool:
        """Whether joining the designs of slices reproduces the serial design exactly, checked
        once on a sample: a feature set whose entries are not grouped by trajectory (so that
        the join would only permute them) is designed serially rather than approximately."""
        if self._split_ok is None:
            sample = list(trajectories[:_CHECK_SAMPLE])
            whole = super().design(sample)
            half = len(sample) // 2
            joined = join_designs([super().design(sample[:half]), super().design(sample[half:])])
            self._split_ok = same_design(whole, joined)
            if not self._split_ok:
                log.info("this feature set does not split by trajectory: featurising serially")
        return self._split_ok

    def _for(self, piece: Sequence[TrajectoryTurns]) -> TextFeaturiser:
        """A plain featuriser carrying only the observations of `piece` (what is pickled)."""
        obs: dict[Key, Observation] = {}
        for t in piece:
            for turn in t.turns:
                key = (t.trajectory_id, t.thread, turn.turn)
                found = self.observations.get(key)
                if found is not None:
                    obs[key] = found
        # Hash and action caches only speed things up (same output), so each copy starts empty.
        kw = {f.name: getattr(self, f.name) for f in fields(TextFeaturiser)}
        kw.update(observations=obs, hasher=NgramHasher(), actions={})
        return TextFeaturiser(**kw)


def pooled(featuriser: TextFeaturiser, workers: int | None = None) -> TextFeaturiser:
    """`featuriser` with its `design` run over worker processes for large inputs."""
    kw = {f.name: getattr(featuriser, f.name) for f in fields(TextFeaturiser)}
    out = PooledFeaturiser(**kw)
    out.workers = workers
    return out
