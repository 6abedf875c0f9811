"""Generation of debugging-environment rollouts with exact ground truth: config, tasks, batch.

Built like `trajlake.synth._generate` (RNGs seeded by name, the truth in its own file, canonical
JSONL) so the two environments are generated, ingested and evaluated the same way, and a credit
source can be compared across both.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trajlake.synth_debug._dynamics import (
    START,
    DebugDynamics,
    Episode,
    observe,
    simulate,
    state_id,
    value_matrix,
)
from trajlake.synth_debug._policy import DebugPolicy
from trajlake.synth_debug._render import TOOLS, DebugRenderer, DebugRepo, make_repo

HARNESS = "trajlake-synth-debug"


@dataclass(frozen=True)
class DebugConfig:
    """What to generate; the same config and policy always give the same records."""

    seed: int = 0
    """Seeds tasks, per-rollout skill, actions, outcomes and text."""
    n_tasks: int = 50
    """Tasks (fake repositories), ids `debug-repo-0000` …"""
    rollouts_per_task: int = 8
    """Rollouts per task; they share `group_id` (the task id)."""
    max_turns: int = 30
    """Turn budget; a rollout that has not submitted by then is truncated (a failure)."""
    n_files: int = 10
    """Modules per fake repository (bugs and the shared helper sit in distinct ones)."""
    verifier_noise: float = 0.02
    """P(the hidden verifier flips the outcome of a submit)."""
    skill_sd: float = 0.6
    """Spread of the per-rollout skill (better fixes, fewer regressions, sharper policy)."""
    task_offset: int = 0
    """Index of the first task (to draw disjoint task sets from one seed)."""

    def __post_init__(self) -> None:
        if self.n_tasks < 0 or self.rollouts_per_task < 1 or self.max_turns < 1:
            raise ValueError("need n_tasks >= 0, rollouts_per_task >= 1 and max_turns >= 1")
        if not 5 <= self.n_files <= 16:
            raise ValueError(f"n_files must be in 5 … 16, got {self.n_files}")
        if not 0 <= self.verifier_noise < 0.5:
            raise ValueError("verifier_noise must be in [0, 0.5)")


@dataclass(frozen=True)
class DebugTask:
    """One task: a fake repository with 1–3 bugs and its hidden difficulty."""

    index: int
    repo: DebugRepo
    p_search: float
    p_read: float
    p_fix: float
    p_break: float
    p_trace: float

    @property
    def task_id(self) -> str:
        """Task id, e.g. `debug-repo-0042`."""
        return self.repo.task_id

    @property
    def n_bugs(self) -> int:
        """Bugs in the task (the first is the primary one)."""
        return len(self.repo.bugs)


def make_task(config: DebugConfig, index: int) -> DebugTask:
    """Task `index` of `config.seed` (independent of the policy)."""
    rng = random.Random(f"synth-debug:{config.seed}:task:{index}")
    n_bugs = rng.choices([1, 2, 3], weights=[0.2, 0.45, 0.35])[0]
    repo = make_repo(rng, f"debug-repo-{index:04d}", config.n_files, n_bugs)
    return DebugTask(
        index, repo, rng.uniform(0.15, 0.45), rng.uniform(0.08, 0.2), rng.uniform(0.35, 0.8),
        rng.uniform(0.1, 0.3), rng.uniform(0.2, 0.5),
    )  # fmt: skip


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


@dataclass(frozen=True)
class RolloutSetup:
    """A rollout's hidden parameters: skill, sampling temperature and dynamics."""

    skill: float
    temperature: float
    dynamics: DebugDynamics


def rollout_setup(config: DebugConfig, task: DebugTask, rng: random.Random) -> RolloutSetup:
    """Draw the per-rollout skill (the first draw of `rng`, so it is policy-independent)."""
    skill = rng.gauss(0.0, config.skill_sd)
    dyn = DebugDynamics(
        n_bugs=task.n_bugs,
        p_search=task.p_search,
        p_read=task.p_read,
        p_fix=_sigmoid(_logit(task.p_fix) + skill),
        p_break=_sigmoid(_logit(task.p_break) - skill),
        p_trace=task.p_trace,
        verifier_noise=config.verifier_noise,
    )
    return RolloutSetup(skill, math.exp(-0.4 * skill), dyn)


@dataclass
class DebugBatch:
    """Generated trajectories (canonical dicts) and their ground truth, in the same order."""

    config: DebugConfig
    policy: DebugPolicy
    trajectories: list[dict[str, Any]] = field(default_factory=list)
    truth: list[dict[str, Any]] = field(default_factory=list)
    """Per trajectory: ids, hidden task/rollout parameters, per-turn full state, observation
    and action, `values` V*(s_0) … V*(s_T) (the last is the outcome), `credits`, `success`."""

    def write_jsonl(self, path: str | os.PathLike[str]) -> None:
        """Write the trajectories as canonical JSONL (what `trajlake ingest` reads)."""
        _write_lines(path, self.trajectories)

    def write_truth(self, path: str | os.PathLike[str]) -> None:
        """Write the ground truth as JSONL, one line per trajectory (`credit-eval --truth`)."""
        _write_lines(path, self.truth)

    @property
    def success_rate(self) -> float:
        """Fraction of trajectories that were resolved."""
        return sum(bool(t["success"]) for t in self.truth) / max(len(self.truth), 1)


def _write_lines(path: str | os.PathLike[str], rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def _rollouts(config: DebugConfig) -> Iterator[tuple[DebugTask, int, RolloutSetup, random.Random]]:
    for i in range(config.task_offset, config.task_offset + config.n_tasks):
        task = make_task(config, i)
        for attempt in range(config.rollouts_per_task):
            rng = random.Random(f"synth-debug:{config.seed}:rollout:{i}:{attempt}")
            yield task, attempt, rollout_setup(config, task, rng), rng


def generate(config: DebugConfig, policy: DebugPolicy | None = None) -> DebugBatch:
    """Sample `n_tasks × rollouts_per_task` rollouts of `policy` with their ground truth.

    V*(s_t) = P(success | state before turn t, this task, this rollout's policy), exact by
    dynamic programming; V*(s_T) is the realised outcome; credit c*_t = V*(s_{t+1}) − V*(s_t).
    """
    policy = policy or DebugPolicy.default()
    batch = DebugBatch(config, policy)
    for task, attempt, setup, rng in _rollouts(config):
        table = policy.table(setup.temperature)
        episode = simulate(setup.dynamics, table, config.max_turns, rng)
        index, values = value_matrix(setup.dynamics, table, config.max_turns)
        v = [float(values[config.max_turns - t, index[s]]) for t, s in enumerate(episode.states)]
        v.append(1.0 if episode.success else 0.0)
        traj = _render(config, policy, task, attempt, episode)
        batch.trajectories.append(traj)
        batch.truth.append(
            {
                "trajectory_id": traj["trajectory_id"],
                "task_id": task.task_id,
                "attempt": attempt,
                "skill": setup.skill,
                "temperature": setup.temperature,
                "task": {
                    "n_bugs": task.n_bugs,
                    "p_search": task.p_search,
                    "p_read": task.p_read,
                    "p_fix": setup.dynamics.p_fix,
                    "p_break": setup.dynamics.p_break,
                    "p_trace": task.p_trace,
                },
                "states": [state_id(s) for s in episode.states],
                "observations": [observe(s) for s in episode.states],
                "actions": list(episode.actions),
                "values": v,
                "credits": [b - a for a, b in itertools.pairwise(v)],
                "success": episode.success,
                "submitted": episode.submitted,
            }
        )
    return batch


def exact_success(config: DebugConfig, policy: DebugPolicy | None = None) -> float:
    """Expected success rate of `generate(config, policy)`: mean V*(s_0) over its rollouts."""
    policy = policy or DebugPolicy.default()
    total, count = 0.0, 0
    for _task, _attempt, setup, _rng in _rollouts(config):
        table = policy.table(setup.temperature)
        index, values = value_matrix(setup.dynamics, table, config.max_turns)
        total += float(values[config.max_turns, index[START]])
        count += 1
    return total / max(count, 1)


def _render(
    config: DebugConfig, policy: DebugPolicy, task: DebugTask, attempt: int, episode: Episode
) -> dict[str, Any]:
    repo = task.repo
    rng = random.Random(f"synth-debug:{config.seed}:text:{task.index}:{attempt}")
    renderer = DebugRenderer(repo, rng)
    start = dt.datetime(2026, 2, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=3 * task.index)
    start += dt.timedelta(seconds=11 * attempt)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are a coding agent in a checkout of {repo.package}. "
         "Find and fix the problem with the tools, run the tests, then call submit."},
        {"role": "user", "content": repo.issue},
    ]  # fmt: skip
    prompt = 300 + len(repo.issue) // 4
    after = [*episode.states[1:], episode.final]
    now = start
    for t, (action, before) in enumerate(zip(episode.actions, episode.states, strict=True)):
        assistant, tool = renderer.turn(t, action, before, after[t], observe(before))
        now += dt.timedelta(seconds=rng.randint(2, 40))
        assistant.update(model=policy.name, prompt_tokens=prompt, timestamp=now.isoformat())
        prompt += assistant["completion_tokens"] + len(tool["content"]) // 4
        messages += [assistant, tool]
    run_id = f"debug-s{config.seed}-{policy.name}"
    return {
        "trajectory_id": f"{run_id}-{task.index:04d}-a{attempt}",
        "task_id": task.task_id,
        "task_source": HARNESS,
        "harness": HARNESS,
        "harness_version": "1",
        "policy_model": policy.name,
        "run_id": run_id,
        "stage": "rl",
        "group_id": task.task_id,
        "attempt": attempt,
        "started_at": start.isoformat(),
        "ended_at": now.isoformat(),
        "status": "completed" if episode.submitted else "truncated",
        "resolved": episode.success,
        "reward": 1.0 if episode.success else 0.0,
        "outcome_source": "synth-debug-verifier",
        "final_output": renderer.patch if episode.submitted else None,
        "tools": TOOLS,
        "source_format": "canonical",
        "attrs": {"synth_debug": {"seed": config.seed, "n_bugs": task.n_bugs}},
        "messages": messages,
    }
