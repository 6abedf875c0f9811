"""Generation of synthetic rollouts with ground truth: config, batch, JSONL, success rates.

Every random draw comes from an RNG seeded by name (seed + task, seed + rollout, seed + text), so a
task does not change with the policy or with how many tasks are drawn, the text never shifts the
dynamics, and the same config always writes the same files. Values and credits go to the truth
file, not into the trajectories: those carry only what the policy saw and did (observation and
action in each assistant message's attrs, which behaviour cloning reads back).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import os
import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from trajlake.synth._model import (
    START,
    PolicyParams,
    Rollout,
    TaskDynamics,
    exact_values,
    observe,
    policy_table,
    simulate,
    state_id,
)
from trajlake.synth._render import TOOLS, RepoSpec, TurnRenderer, make_repo

HARNESS = "trajlake-synth"


@dataclass(frozen=True)
class SynthConfig:
    """What to generate; the same config and params always give the same records."""

    seed: int = 0
    """Seeds tasks, per-rollout skill, actions, outcomes and text."""
    n_tasks: int = 50
    """Tasks (fake repositories), ids `synth-repo-0000` …"""
    rollouts_per_task: int = 8
    """Rollouts per task; they share `group_id` (the task id)."""
    max_turns: int = 16
    """Turn budget; a rollout that has not submitted by then is truncated (a failure)."""
    n_files: int = 6
    """Source files per fake repository (one of them is buggy)."""
    verifier_noise: float = 0.03
    """P(the hidden verifier flips the outcome of a submit)."""
    skill_sd: float = 0.6
    """Spread of the per-rollout skill (sharper policy and better fixes when higher)."""
    task_offset: int = 0
    """Index of the first task (to draw disjoint task sets from one seed)."""

    def __post_init__(self) -> None:
        if self.n_tasks < 0 or self.rollouts_per_task < 1 or self.max_turns < 1:
            raise ValueError("need n_tasks >= 0, rollouts_per_task >= 1 and max_turns >= 1")
        if self.n_files < 2:
            raise ValueError("n_files must be >= 2")
        if not 0 <= self.verifier_noise < 0.5:
            raise ValueError("verifier_noise must be in [0, 0.5)")


@dataclass(frozen=True)
class SynthTask:
    """One task: a fake repository and its hidden difficulty."""

    index: int
    repo: RepoSpec
    p_grep: float
    p_trace: float
    p_fix: float

    @property
    def task_id(self) -> str:
        """Task id, e.g. `synth-repo-0042`."""
        return self.repo.task_id


def make_task(config: SynthConfig, index: int) -> SynthTask:
    """Task `index` of `config.seed` (independent of the policy)."""
    rng = random.Random(f"synth:{config.seed}:task:{index}")
    repo = make_repo(rng, f"synth-repo-{index:04d}", config.n_files)
    return SynthTask(
        index, repo, rng.uniform(0.25, 0.7), rng.uniform(0.2, 0.6), rng.uniform(0.35, 0.85)
    )


@dataclass(frozen=True)
class RolloutSetup:
    """A rollout's hidden parameters: its skill, sampling temperature and dynamics."""

    skill: float
    temperature: float
    dynamics: TaskDynamics


def rollout_setup(config: SynthConfig, task: SynthTask, rng: random.Random) -> RolloutSetup:
    """Draw the per-rollout skill (first thing drawn from `rng`, so it is policy-independent)."""
    skill = rng.gauss(0.0, config.skill_sd)
    logit = math.log(task.p_fix / (1 - task.p_fix)) + skill
    dyn = TaskDynamics(
        n_files=config.n_files,
        p_grep=task.p_grep,
        p_trace=task.p_trace,
        p_fix=1 / (1 + math.exp(-logit)),
        verifier_noise=config.verifier_noise,
    )
    return RolloutSetup(skill, math.exp(-0.5 * skill), dyn)


@dataclass
class SynthBatch:
    """Generated trajectories (canonical dicts) and their ground truth, in the same order."""

    config: SynthConfig
    params: PolicyParams
    trajectories: list[dict[str, Any]] = field(default_factory=list)
    truth: list[dict[str, Any]] = field(default_factory=list)
    """Per trajectory: ids, hidden task/rollout parameters, per-turn full state, observation
    and action, `values` V*(s_0) … V*(s_T) (the last is the outcome), `credits` and `success`."""

    def write_jsonl(self, path: str | os.PathLike[str]) -> None:
        """Write the trajectories as canonical JSONL (what `trajlake ingest` reads)."""
        _write_lines(path, self.trajectories)

    def write_truth(self, path: str | os.PathLike[str]) -> None:
        """Write the ground truth as JSONL, one line per trajectory."""
        _write_lines(path, self.truth)

    @property
    def success_rate(self) -> float:
        """Fraction of trajectories that were resolved."""
        return sum(bool(t["success"]) for t in self.truth) / max(len(self.truth), 1)


def _write_lines(path: str | os.PathLike[str], rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def _rollouts(
    config: SynthConfig, params: PolicyParams
) -> Iterator[tuple[SynthTask, int, RolloutSetup, random.Random]]:
    for i in range(config.task_offset, config.task_offset + config.n_tasks):
        task = make_task(config, i)
        for attempt in range(config.rollouts_per_task):
            rng = random.Random(f"synth:{config.seed}:rollout:{i}:{attempt}")
            yield task, attempt, rollout_setup(config, task, rng), rng


def generate(config: SynthConfig, params: PolicyParams | None = None) -> SynthBatch:
    """Sample `n_tasks × rollouts_per_task` rollouts of `params` and compute their ground truth.

    V*(s_t) = P(success | state before turn t, this task, this rollout's policy), exact by
    dynamic programming; V*(s_T) is the realised outcome; credit c_t = V*(s_{t+1}) − V*(s_t).
    """
    params = params or PolicyParams.default()
    batch = SynthBatch(config, params)
    for task, attempt, setup, rng in _rollouts(config, params):
        table = policy_table(params, setup.temperature)
        rollout = simulate(setup.dynamics, table, config.max_turns, rng)
        values = exact_values(setup.dynamics, table, config.max_turns)
        v = [values[config.max_turns - t][s] for t, s in enumerate(rollout.states)]
        v.append(1.0 if rollout.success else 0.0)
        traj = _render(config, params, task, attempt, rollout)
        batch.trajectories.append(traj)
        batch.truth.append(
            {
                "trajectory_id": traj["trajectory_id"],
                "task_id": task.task_id,
                "attempt": attempt,
                "skill": setup.skill,
                "temperature": setup.temperature,
                "task": {
                    "p_grep": task.p_grep,
                    "p_trace": task.p_trace,
                    "p_fix": setup.dynamics.p_fix,
                    "buggy_file": task.repo.files[task.repo.buggy],
                },
                "states": [state_id(s) for s in rollout.states],
                "observations": [observe(s) for s in rollout.states],
                "actions": list(rollout.actions),
                "values": v,
                "credits": [b - a for a, b in itertools.pairwise(v)],
                "success": rollout.success,
                "submitted": rollout.submitted,
            }
        )
    return batch


def _render(
    config: SynthConfig, params: PolicyParams, task: SynthTask, attempt: int, rollout: Rollout
) -> dict[str, Any]:
    repo = task.repo
    rng = random.Random(f"synth:{config.seed}:text:{task.index}:{attempt}")
    renderer = TurnRenderer(repo, rng)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=task.index)
    start += dt.timedelta(seconds=7 * attempt)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are a software engineering agent working in /repo "
         f"({repo.package}). Use the tools to fix the issue, then call submit."},
        {"role": "user", "content": repo.issue},
    ]  # fmt: skip
    prompt = 350 + len(repo.issue) // 4
    after = [*rollout.states[1:], rollout.final]
    now = start
    for t, (action, before) in enumerate(zip(rollout.actions, rollout.states, strict=True)):
        assistant, tool = renderer.turn(t, action, before, after[t], observe(before))
        now += dt.timedelta(seconds=rng.randint(3, 30))
        assistant.update(model=params.name, prompt_tokens=prompt, timestamp=now.isoformat())
        prompt += assistant["completion_tokens"] + len(tool["content"]) // 4
        messages += [assistant, tool]
    run_id = f"synth-s{config.seed}-{params.name}"
    return {
        "trajectory_id": f"{run_id}-{task.index:04d}-a{attempt}",
        "task_id": task.task_id,
        "task_source": "trajlake-synth",
        "harness": HARNESS,
        "harness_version": "1",
        "policy_model": params.name,
        "run_id": run_id,
        "stage": "rl",
        "group_id": task.task_id,
        "attempt": attempt,
        "started_at": start.isoformat(),
        "ended_at": now.isoformat(),
        "status": "completed" if rollout.submitted else "truncated",
        "resolved": rollout.success,
        "reward": 1.0 if rollout.success else 0.0,
        "outcome_source": "synth-verifier",
        "final_output": renderer.patch if rollout.submitted else None,
        "tools": TOOLS,
        "source_format": "canonical",
        "attrs": {"synth": {"seed": config.seed, "policy_version": params.version}},
        "messages": messages,
    }


def success_rate(params: PolicyParams, config: SynthConfig, n: int | None = None) -> float:
    """Monte-Carlo success rate of `params` over `config`'s tasks (no text is rendered).

    Args:
        n: rollouts to sample (default: `n_tasks × rollouts_per_task`), cycling over the tasks.
    """
    if config.n_tasks == 0:
        raise ValueError("config has no tasks")
    total = n if n is not None else config.n_tasks * config.rollouts_per_task
    tasks = [make_task(config, config.task_offset + i) for i in range(config.n_tasks)]
    wins = 0
    for k in range(total):
        task = tasks[k % config.n_tasks]
        rng = random.Random(f"synth:{config.seed}:mc:{task.index}:{k}")
        setup = rollout_setup(config, task, rng)
        table = policy_table(params, setup.temperature)
        wins += simulate(setup.dynamics, table, config.max_turns, rng).success
    return wins / max(total, 1)


def exact_success(params: PolicyParams, config: SynthConfig) -> float:
    """Expected success rate of `generate(config, params)`: the mean of V*(s_0) over its rollouts
    (exact given the drawn tasks and rollout skills; only sampling noise is integrated out)."""
    total, count = 0.0, 0
    for _task, _attempt, setup, _rng in _rollouts(config, params):
        table = policy_table(params, setup.temperature)
        total += exact_values(setup.dynamics, table, config.max_turns)[config.max_turns][START]
        count += 1
    return total / max(count, 1)


def synth_turns(messages: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(observation, action) of each synthetic assistant turn, from canonical or lake messages
    (whose `attrs` may be a JSON string); other messages are skipped."""
    out = []
    for m in messages:
        attrs = m.get("attrs")
        if isinstance(attrs, str):
            attrs = json.loads(attrs)
        if m.get("role") == "assistant" and isinstance(attrs, Mapping) and "synth" in attrs:
            out.append((str(attrs["synth"]["state"]), str(attrs["synth"]["action"])))
    return out


def turn_examples(
    trajectories: Iterable[Mapping[str, Any]], *, resolved_only: bool = True
) -> list[tuple[str, str, float]]:
    """Behaviour-cloning examples (observation, action, weight 1.0) from canonical trajectories.

    Args:
        resolved_only: keep only turns of resolved trajectories (rejection-sampling SFT).
    """
    return [
        (obs, action, 1.0)
        for traj in trajectories
        if traj.get("resolved") or not resolved_only
        for obs, action in synth_turns(traj.get("messages", []))
    ]
