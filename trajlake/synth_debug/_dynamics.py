"""Hidden dynamics of the multi-bug debugging environment: states, transitions, exact V*.

A task has one *primary* bug (the one the issue describes and the visible tests cover) and up to
two *secondary* bugs that only the hidden verifier checks, so the visible suite can pass before
the fix is complete. Locating bugs takes long exploration, and an edit can break something that
a later `revert` undoes. The state is small, so P(success | state, policy) is exact by dynamic
programming over (state, turns left).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

Action = Literal["search", "read", "edit", "test", "revert", "submit"]
ACTIONS: tuple[Action, ...] = ("search", "read", "edit", "test", "revert", "submit")
"""Abstract actions, in the column order of the policy's logits."""

State = tuple[int, int, int, int, int]
"""(primary, located, fixed, broken, tests): primary 0 unknown / 1 located / 2 fixed; secondary
bugs located but unfixed and fixed; a regression present (0/1); the visible suite's last result
0 untested / 1 fail / 2 regress (a regression fails) / 3 pass."""

START: State = (0, 0, 0, 0, 0)
_PRIMARY = ("unknown", "located", "fixed")
_TESTS = ("untested", "fail", "regress", "pass")
OBSERVATIONS: tuple[str, ...] = tuple(
    f"{p}/{n}/{t}" for p in ("unknown", "found") for n in range(3) for t in _TESTS
)
"""What the policy conditions on: primary found?, secondary bugs found (0–2), last test result.
It never sees whether an edit fixed its target or whether a regression is present."""


def observe(state: State) -> str:
    """The observation of a full state, e.g. 'found/1/pass'."""
    primary, located, fixed, _broken, tests = state
    return f"{'found' if primary else 'unknown'}/{located + fixed}/{_TESTS[tests]}"


def state_id(state: State) -> str:
    """A readable id of a full state, e.g. 'primary=fixed located=1 fixed=0 broken=0 tests=pass'."""
    primary, located, fixed, broken, tests = state
    return (
        f"primary={_PRIMARY[primary]} located={located} fixed={fixed} broken={broken} "
        f"tests={_TESTS[tests]}"
    )


def states(n_bugs: int) -> tuple[State, ...]:
    """Every state of a task with `n_bugs` bugs (one primary, `n_bugs − 1` secondary)."""
    n_sec = n_bugs - 1
    return tuple(
        (p, a, f, b, t)
        for p in range(3)
        for a in range(n_sec + 1)
        for f in range(n_sec + 1 - a)
        for b in range(2)
        for t in range(4)
    )


@dataclass(frozen=True)
class DebugDynamics:
    """Hidden per-task (and per-rollout) probabilities of the environment."""

    n_bugs: int
    """Bugs in the task: 1 primary + n_bugs − 1 secondary (1 … 3)."""
    p_search: float
    """P(searching for the issue's symptom locates the primary bug)."""
    p_read: float
    """P(reading a file locates some not yet located bug), uniform over those bugs."""
    p_fix: float
    """P(an edit of a located bug fixes it)."""
    p_break: float
    """P(an edit introduces a regression that fails the visible suite)."""
    p_trace: float
    """P(a failing visible test's traceback locates the primary bug)."""
    verifier_noise: float = 0.02
    """P(the hidden verifier flips the outcome of a submit)."""

    def __post_init__(self) -> None:
        if not 1 <= self.n_bugs <= 3:
            raise ValueError(f"n_bugs must be 1, 2 or 3, got {self.n_bugs}")
        probs = (self.p_search, self.p_read, self.p_fix, self.p_break, self.p_trace)
        if not all(0.0 <= p <= 1.0 for p in probs):
            raise ValueError("every probability must lie in [0, 1]")
        if not 0.0 <= self.verifier_noise < 0.5:
            raise ValueError("verifier_noise must be in [0, 0.5)")

    def transitions(self, state: State, action: Action) -> list[tuple[float, State]]:
        """Next-state distribution of a non-submit action (equal states merged)."""
        out: dict[State, float] = {}
        for p, nxt in self._branches(state, action):
            if p > 0.0:
                out[nxt] = out.get(nxt, 0.0) + p
        return [(p, s) for s, p in out.items()]

    def _branches(self, state: State, action: Action) -> list[tuple[float, State]]:
        primary, located, fixed, broken, tests = state
        if action == "search":
            if primary:
                return [(1.0, state)]
            return [(self.p_search, (1, located, fixed, broken, tests)), (1 - self.p_search, state)]
        if action == "read":
            return self._read(state)
        if action == "edit":
            return self._edit(state)
        if action == "test":
            # The visible suite checks the primary bug and regressions only: it passes with
            # secondary bugs still in place, the trap an early submit falls into.
            result = 2 if broken else 3 if primary == 2 else 1
            if primary == 0:  # the primary bug's traceback is in the output whenever it fails
                found = (1, located, fixed, broken, result)
                return [
                    (self.p_trace, found),
                    (1 - self.p_trace, (0, located, fixed, broken, result)),
                ]
            return [(1.0, (primary, located, fixed, broken, result))]
        if action == "revert":
            return [(1.0, (primary, located, fixed, 0, 0) if broken else state)]
        raise ValueError(f"no transitions for action {action!r}")

    def _read(self, state: State) -> list[tuple[float, State]]:
        primary, located, fixed, broken, tests = state
        unknown_sec = self.n_bugs - 1 - located - fixed
        unknown = (primary == 0) + unknown_sec
        if unknown == 0:
            return [(1.0, state)]
        out = [(1 - self.p_read, state)]
        if primary == 0:
            out.append((self.p_read / unknown, (1, located, fixed, broken, tests)))
        if unknown_sec:
            share = self.p_read * unknown_sec / unknown
            out.append((share, (primary, located + 1, fixed, broken, tests)))
        return out

    def _edit(self, state: State) -> list[tuple[float, State]]:
        """The edit targets a found bug uniformly (the agent cannot tell which are fixed)."""
        primary, located, fixed, broken, _tests = state
        found = (primary > 0) + located + fixed
        targets: list[tuple[float, tuple[int, int, int]]] = []
        if found == 0:  # a blind edit of some file: it can only break things
            targets.append((1.0, (primary, located, fixed)))
        else:
            if primary == 1:
                targets.append((self.p_fix / found, (2, located, fixed)))
                targets.append(((1 - self.p_fix) / found, (primary, located, fixed)))
            elif primary == 2:
                targets.append((1 / found, (primary, located, fixed)))
            if located:
                share = located / found
                targets.append((share * self.p_fix, (primary, located - 1, fixed + 1)))
                targets.append((share * (1 - self.p_fix), (primary, located, fixed)))
            if fixed:
                targets.append((fixed / found, (primary, located, fixed)))
        out = []
        # Tests go back to untested: the last run no longer describes the edited code.
        for p, (pr, lo, fx) in targets:
            out.append((p * self.p_break, (pr, lo, fx, 1, 0)))
            out.append((p * (1 - self.p_break), (pr, lo, fx, broken, 0)))
        return out

    def complete(self, state: State) -> bool:
        """Every bug fixed and no regression: what the hidden verifier checks."""
        primary, located, fixed, broken, _tests = state
        return primary == 2 and located == 0 and fixed == self.n_bugs - 1 and not broken

    def p_success(self, state: State) -> float:
        """P(success) of submitting in `state`."""
        return 1 - self.verifier_noise if self.complete(state) else self.verifier_noise


def value_matrix(
    dyn: DebugDynamics, table: Mapping[str, Sequence[float]], max_turns: int
) -> tuple[dict[State, int], npt.NDArray[np.float64]]:
    """(state index, V) with V[k, index[s]] = P(success | s, k turns left): exact DP.

    A rollout that has not submitted when its turns run out fails, so V[0] = 0; then
    V[k] = π(submit)·P(success) + P_π V[k−1], with P_π the policy's one-turn transition matrix.
    """
    all_states = states(dyn.n_bugs)
    index = {s: i for i, s in enumerate(all_states)}
    n = len(all_states)
    move = np.zeros((n, n))
    reward = np.zeros(n)
    for i, s in enumerate(all_states):
        probs = table[observe(s)]
        reward[i] = probs[-1] * dyn.p_success(s)
        for a, p in zip(ACTIONS[:-1], probs[:-1], strict=True):
            if p:
                for q, nxt in dyn._branches(s, a):  # equal next states add up in the matrix
                    move[i, index[nxt]] += p * q
    values = np.zeros((max_turns + 1, n))
    for k in range(1, max_turns + 1):
        values[k] = reward + move @ values[k - 1]
    return index, values


def exact_values(
    dyn: DebugDynamics, table: Mapping[str, Sequence[float]], max_turns: int
) -> list[dict[State, float]]:
    """V[k][s] = P(success | state s, k turns left, policy `table`), exact (see `value_matrix`)."""
    index, values = value_matrix(dyn, table, max_turns)
    return [{s: float(row[i]) for s, i in index.items()} for row in values]


@dataclass
class Episode:
    """One sampled episode in abstract form."""

    states: list[State] = field(default_factory=list)
    """s_0 … s_{T-1}: the state before each turn."""
    actions: list[Action] = field(default_factory=list)
    final: State = START
    """The state after the last turn."""
    success: bool = False
    submitted: bool = False


def _draw(rng: random.Random, weights: Sequence[float]) -> int:
    x = rng.random() * sum(weights)
    for i, w in enumerate(weights):
        x -= w
        if x < 0:
            return i
    return max(i for i, w in enumerate(weights) if w > 0)


def simulate(
    dyn: DebugDynamics,
    table: Mapping[str, Sequence[float]],
    max_turns: int,
    rng: random.Random,
    *,
    start: State = START,
) -> Episode:
    """Sample one episode of at most `max_turns` turns from `start`."""
    out = Episode()
    state = start
    for _ in range(max_turns):
        action = ACTIONS[_draw(rng, table[observe(state)])]
        out.states.append(state)
        out.actions.append(action)
        if action == "submit":
            out.final, out.submitted = state, True
            out.success = rng.random() < dyn.p_success(state)
            return out
        options = dyn.transitions(state, action)
        state = options[_draw(rng, [p for p, _ in options])][1]
    out.final = state
    return out
