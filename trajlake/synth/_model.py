"""The hidden dynamics of the synthetic bug-fixing environment, the tabular policy and exact V*.

The environment state is small and discrete (bug located? edit none/wrong/correct? last test
result?) so P(success | state, policy) is computed exactly by dynamic programming over
(state, steps left); the policy only sees an observation of it (not whether an edit is correct).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Action = Literal["grep", "read", "edit", "run_tests", "submit"]
ACTIONS: tuple[Action, ...] = ("grep", "read", "edit", "run_tests", "submit")
"""Abstract actions, in the column order of `PolicyParams.logits`."""

_LOC = ("unlocated", "located")
_EDIT = ("none", "wrong", "correct")
_OBS_EDIT = ("none", "edited")
_TESTS = ("untested", "fail", "pass")

State = tuple[int, int, int]
"""Full hidden state (located 0/1, edit 0 none / 1 wrong / 2 correct, tests 0/1 fail/2 pass)."""

STATES: tuple[State, ...] = tuple((a, b, c) for a in range(2) for b in range(3) for c in range(3))
OBSERVATIONS: tuple[str, ...] = tuple(
    f"{loc}/{edit}/{tests}" for loc in _LOC for edit in _OBS_EDIT for tests in _TESTS
)
"""Observation ids the policy conditions on, e.g. 'located/edited/fail'."""

START: State = (0, 0, 0)


def observe(state: State) -> str:
    """The observation id of a full state (the policy cannot see if an edit is correct)."""
    loc, edit, tests = state
    return f"{_LOC[loc]}/{_OBS_EDIT[min(edit, 1)]}/{_TESTS[tests]}"


def state_id(state: State) -> str:
    """A readable id of a full state, e.g. 'located/correct/untested'."""
    loc, edit, tests = state
    return f"{_LOC[loc]}/{_EDIT[edit]}/{_TESTS[tests]}"


@dataclass(frozen=True)
class TaskDynamics:
    """Hidden per-task (and per-rollout) probabilities of the outcome model."""

    n_files: int
    p_grep: float
    """P(a grep for the error finds the buggy file)."""
    p_trace: float
    """P(a failing test run's traceback points at the buggy file)."""
    p_fix: float
    """P(an edit of the located buggy file is correct)."""
    verifier_noise: float
    """P(the final verifier flips the outcome)."""

    def transitions(self, state: State, action: Action) -> list[tuple[float, State]]:
        """Next-state distribution of a non-submit action."""
        loc, edit, tests = state
        found = (1, edit, tests)
        if action == "grep":
            return [(1.0, state)] if loc else [(self.p_grep, found), (1 - self.p_grep, state)]
        if action == "read":
            p = 1.0 / self.n_files
            return [(1.0, state)] if loc else [(p, found), (1 - p, state)]
        if action == "edit":
            # Editing without knowing the file hits the buggy one only by chance.
            p = self.p_fix if loc else self.p_fix / self.n_files
            return [(p, (loc, 2, 0)), (1 - p, (loc, 1, 0))]
        if action == "run_tests":
            # Tests pass exactly when the edit is correct; a failure's traceback may locate the bug.
            result = 2 if edit == 2 else 1
            if loc or result == 2:
                return [(1.0, (loc, edit, result))]
            return [(self.p_trace, (1, edit, result)), (1 - self.p_trace, (0, edit, result))]
        raise ValueError(f"no transitions for action {action!r}")

    def p_success(self, state: State) -> float:
        """P(success) of submitting in `state`."""
        return 1 - self.verifier_noise if state[1] == 2 else self.verifier_noise


def _default_logits(obs: str) -> tuple[float, ...]:
    loc, edit, tests = obs.split("/")
    g, r, e, t, s = 0.6, 0.6, 0.4, 0.2, -0.6  # a mediocre, barely state-aware prior
    if loc == "located":
        g, r, e = g - 0.6, r - 0.2, e + 0.5
    if edit == "edited":
        s += 0.9
    if tests == "pass":
        s += 0.4
    if tests == "fail":
        e += 0.2
    return (g, r, e, t, s)


@dataclass(frozen=True)
class PolicyParams:
    """A tabular softmax policy: one row of action logits (order `ACTIONS`) per observation."""

    logits: Mapping[str, tuple[float, ...]]
    version: int = 0
    """Bumped by every `fit`; part of the policy model name."""

    @classmethod
    def default(cls) -> PolicyParams:
        """The initial, mediocre policy."""
        return cls({obs: _default_logits(obs) for obs in OBSERVATIONS})

    @property
    def name(self) -> str:
        """Model name recorded as `policy_model`."""
        return f"synth-policy-v{self.version}"

    def probs(self, obs: str, temperature: float = 1.0) -> tuple[float, ...]:
        """Action probabilities in observation `obs` at a sampling temperature."""
        row = [x / temperature for x in self.logits[obs]]
        top = max(row)
        exps = [math.exp(x - top) for x in row]  # less the max: exp cannot overflow
        total = sum(exps)
        return tuple(x / total for x in exps)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "version": self.version,
            "actions": list(ACTIONS),
            "logits": {k: list(v) for k, v in self.logits.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PolicyParams:
        """Inverse of `to_dict`."""
        if list(data.get("actions", ACTIONS)) != list(ACTIONS):
            raise ValueError(f"actions must be {list(ACTIONS)}, got {data.get('actions')}")
        logits = {str(k): tuple(float(x) for x in v) for k, v in data["logits"].items()}
        missing = set(OBSERVATIONS) - set(logits)
        if missing or any(len(v) != len(ACTIONS) for v in logits.values()):
            raise ValueError(f"logits need {len(ACTIONS)} values for every observation")
        return cls(logits, version=int(data.get("version", 0)))

    def fit(
        self, examples: Iterable[tuple[str, str, float]], *, smoothing: float = 2.0
    ) -> PolicyParams:
        """Behaviour cloning: weighted maximum likelihood with smoothing toward this policy.

        For each observation with data, the new action distribution is
        `(sum of weights per action + smoothing * p_old) / (total weight + smoothing)`, the
        closed-form weighted MLE under a Dirichlet prior centred on the current policy;
        observations without data keep their logits.

        Args:
            examples: (observation id, action, weight ≥ 0) triples, e.g. `turn_examples(...)`.
            smoothing: prior strength in pseudo-examples (> 0 keeps every action possible).
        """
        if smoothing <= 0:
            raise ValueError("smoothing must be > 0")
        counts: dict[str, list[float]] = {}
        for obs, action, weight in examples:
            if obs not in self.logits:
                raise ValueError(f"unknown observation {obs!r}")
            if weight < 0:
                raise ValueError("example weights must be >= 0")
            row = counts.setdefault(obs, [0.0] * len(ACTIONS))
            if action not in ACTIONS:
                raise ValueError(f"unknown action {action!r}; expected one of {ACTIONS}")
            row[ACTIONS.index(action)] += weight
        logits = dict(self.logits)
        for obs, row in counts.items():
            old = self.probs(obs)
            total = sum(row) + smoothing
            new = [(n + smoothing * p) / total for n, p in zip(row, old, strict=True)]
            mean = sum(math.log(p) for p in new) / len(new)
            logits[obs] = tuple(math.log(p) - mean for p in new)
        return PolicyParams(logits, version=self.version + 1)


@dataclass
class Rollout:
    """One sampled episode in abstract form."""

    states: list[State] = field(default_factory=list)
    """s_0 … s_{T-1}: the state before each turn."""
    actions: list[Action] = field(default_factory=list)
    final: State = START
    """The state after the last turn (equal to the last of `states` after a submit)."""
    success: bool = False
    submitted: bool = False


def policy_table(params: PolicyParams, temperature: float) -> dict[str, tuple[float, ...]]:
    """Action probabilities per observation at a rollout's temperature."""
    return {obs: params.probs(obs, temperature) for obs in OBSERVATIONS}


def exact_values(
    dyn: TaskDynamics, table: Mapping[str, Sequence[float]], max_turns: int
) -> list[dict[State, float]]:
    """V[k][s] = P(success | state s, k turns left, this policy): exact dynamic programming."""
    values: list[dict[State, float]] = [dict.fromkeys(STATES, 0.0)]
    steps = {(s, a): dyn.transitions(s, a) for s in STATES for a in ACTIONS[:-1]}
    for _ in range(max_turns):
        prev = values[-1]
        cur: dict[State, float] = {}
        for s in STATES:
            probs = table[observe(s)]
            v = probs[-1] * dyn.p_success(s)
            for a, p in zip(ACTIONS[:-1], probs[:-1], strict=True):
                v += p * sum(q * prev[nxt] for q, nxt in steps[(s, a)])
            cur[s] = v
        values.append(cur)
    return values


def _pick(rng: random.Random, weights: Sequence[float]) -> int:
    x = rng.random()
    for i, w in enumerate(weights):
        x -= w
        if x < 0:
            return i
    return len(weights) - 1


def simulate(
    dyn: TaskDynamics,
    table: Mapping[str, Sequence[float]],
    max_turns: int,
    rng: random.Random,
    *,
    start: State = START,
) -> Rollout:
    """Sample one episode of at most `max_turns` turns from `start`."""
    out = Rollout()
    state = start
    for _ in range(max_turns):
        action = ACTIONS[_pick(rng, table[observe(state)])]
        out.states.append(state)
        out.actions.append(action)
        if action == "submit":
            out.final = state
            out.submitted = True
            out.success = rng.random() < dyn.p_success(state)
            return out
        options = dyn.transitions(state, action)
        state = options[_pick(rng, [p for p, _ in options])][1]
    out.final = state
    return out
