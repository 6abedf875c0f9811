"""The rubric judge's criteria, prompt and answer parsing (pure functions, no I/O but reading a
rubric file).

A rubric is a list of weighted criteria. The judge scores every criterion in [0, 1] at a few key
turns; the value of a key turn is the weighted mean of its scores (`Rubric.aggregate`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trajlake.credit._judge_prompt import TurnContext, json_candidates, render_trajectory
from trajlake.credit._types import TrajectoryTurns
from trajlake.errors import TrajlakeError

RUBRIC_PROMPT_VERSION = "judge-rubric-v1"
"""Prefix of the rubric prompt's version (the rubric's name and digest follow it)."""

MAX_CRITERIA = 20
_ID = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


@dataclass(frozen=True)
class Criterion:
    """One rubric criterion: a short id, a title and what earns a high score."""

    id: str
    title: str
    description: str
    weight: float = 1.0


@dataclass(frozen=True)
class Rubric:
    """Weighted criteria the judge scores at key turns."""

    name: str
    criteria: tuple[Criterion, ...]

    @property
    def digest(self) -> str:
        """sha256 of the rubric's canonical JSON: any change to it is a new prompt."""
        payload = json.dumps(
            [self.name, [(c.id, c.title, c.description, c.weight) for c in self.criteria]]
        )
        return hashlib.sha256(payload.encode()).hexdigest()

    @property
    def version(self) -> str:
        """The prompt version of this rubric, part of every cache key."""
        return f"{RUBRIC_PROMPT_VERSION}:{self.name}:{self.digest[:12]}"

    def aggregate(self, scores: Mapping[str, float]) -> float:
        """Σ w_c s_c / Σ w_c over the criteria scored (the others are left out, not zeroed)."""
        weights = {c.id: c.weight for c in self.criteria if c.id in scores}
        total = sum(weights.values())
        return sum(w * scores[c] for c, w in weights.items()) / total


DEFAULT_RUBRIC = Rubric(
    "swe-process",
    (
        Criterion(
            "understanding",
            "Task understanding",
            "The agent has read the task and works on its actual requirement (the failing "
            "behaviour and the expected result), not on a different problem.",
        ),
        Criterion(
            "localisation",
            "Localisation",
            "The agent has found the code responsible for the problem (the right files, "
            "functions and lines).",
        ),
        Criterion(
            "reproduction",
            "Reproduction",
            "The agent has written or run a test or script that reproduces the problem, and seen "
            "it fail, before relying on a fix.",
        ),
        Criterion(
            "fix",
            "Fix correctness",
            "The agent's edits so far address the root cause correctly and completely (every "
            "place the bug lives), without special-casing the tests.",
        ),
        Criterion(
            "verification",
            "Verification",
            "After its fix, the agent has re-run the reproduction or the relevant tests and seen "
            "them pass.",
        ),
        Criterion(
            "regression",
            "Regression avoidance",
            "The agent has checked that existing behaviour still works (existing or related "
            "tests) and its edits have not broken other code; lower this while a break it caused "
            "is not repaired.",
        ),
        Criterion(
            "efficiency",
            "Efficiency",
            "The work so far has moved steadily toward the goal: few repeated, aimless or "
            "failed actions.",
        ),
    ),
)
"""Seven process criteria for software-engineering agents (see docs/credit.md)."""


# Loading -------------------------------------------------------------------------------------


def _fail(where: str, what: str) -> TrajlakeError:
    return TrajlakeError(
        f"{where}: {what} (a rubric is {{'name': ..., 'criteria': [{{'id': 'reproduction', "
        "'title': ..., 'description': ..., 'weight': 1}, ...]}} or that list alone)"
    )


def _criterion(item: Any, i: int, where: str) -> Criterion:
    if not isinstance(item, Mapping):
        raise _fail(where, f"criterion {i + 1} is a {type(item).__name__}, not a mapping")
    cid = item.get("id")
    if not isinstance(cid, str) or not _ID.match(cid):
        raise _fail(
            where,
            f"criterion {i + 1} needs an 'id' of lower-case letters, digits, '_' or '-' "
            f"(≤ 40, starting with a letter); got {cid!r}",
        )
    description = item.get("description")
    if not isinstance(description, str) or not description.strip():
        raise _fail(where, f"criterion {cid!r} needs a non-empty 'description'")
    title = item.get("title", cid)
    if not isinstance(title, str) or not title.strip():
        raise _fail(where, f"criterion {cid!r} has a 'title' that is not a non-empty string")
    weight = item.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise _fail(where, f"criterion {cid!r} has a 'weight' that is not a number: {weight!r}")
    if not math.isfinite(weight) or weight <= 0:
        raise _fail(where, f"criterion {cid!r} needs a finite 'weight' > 0, got {weight!r}")
    unknown = sorted(set(item) - {"id", "title", "description", "weight"})
    if unknown:
        raise _fail(where, f"criterion {cid!r} has unknown fields {unknown}")
    return Criterion(cid, title.strip(), description.strip(), float(weight))


def rubric_from_data(data: Any, *, where: str = "rubric", default_name: str = "custom") -> Rubric:
    """A `Rubric` from its JSON/YAML data, every problem named with `where`."""
    if isinstance(data, Mapping):
        unknown = sorted(set(data) - {"name", "criteria"})
        if unknown:
            raise _fail(where, f"unknown top-level fields {unknown}")
        name, items = data.get("name", default_name), data.get("criteria")
    else:
        name, items = default_name, data
    if not isinstance(name, str) or not _ID.match(name):
        raise _fail(where, f"'name' must be a short lower-case id, got {name!r}")
    if not isinstance(items, Sequence) or isinstance(items, str) or not items:
        raise _fail(where, "no criteria (expected a non-empty list under 'criteria')")
    if len(items) > MAX_CRITERIA:
        raise _fail(where, f"{len(items)} criteria; at most {MAX_CRITERIA}")
    criteria = tuple(_criterion(item, i, where) for i, item in enumerate(items))
    ids = [c.id for c in criteria]
    repeated = sorted({c for c in ids if ids.count(c) > 1})
    if repeated:
        raise _fail(where, f"criterion ids repeat: {repeated}")
    return Rubric(name, criteria)


def load_rubric(source: str | Path | Mapping[str, Any] | Rubric | None) -> Rubric:
    """The rubric in a `.json` / `.yaml` / `.yml` file, a mapping, or the default (None)."""
    if source is None:
        return DEFAULT_RUBRIC
    if isinstance(source, Rubric):
        return source
    if isinstance(source, Mapping):
        return rubric_from_data(source)
    path = Path(source)
    if path.suffix.lower() not in (".json", ".yaml", ".yml"):
        raise ValueError(f"rubric file {str(path)!r} must end in .json, .yaml or .yml")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise TrajlakeError(f"cannot read rubric file {str(path)!r}: {e}") from e
    where = f"rubric file {str(path)!r}"
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise TrajlakeError(f"{where} is not valid {path.suffix[1:].upper()}: {e}") from e
    stem = re.sub(r"[^a-z0-9_-]", "-", path.stem.lower()).lstrip("-_0123456789") or "custom"
    return rubric_from_data(data, where=where, default_name=stem[:40])


# Prompt --------------------------------------------------------------------------------------

_SYSTEM = """\
You are a process judge for software-engineering agent trajectories.
You see a complete trajectory of an agent working on a task, and the final outcome.
Judge the agent's PROCESS with the rubric below, at a few KEY points of the trajectory.

Point 0 means the state before the agent's first action. Point t (1..T) means the state right
after turn t. At each key point, score EVERY criterion in [0, 1] for the work done up to and
including that point: 0 = not met at all so far, 1 = fully met so far. Scores may go down when
the agent undoes progress (a broken edit, a wrong direction). Pick the points where the scores
change most; include point 0. Give between 2 and 8 points.

Rubric ({n} criteria; id: title (weight) — what earns a high score):
{criteria}

Answer with ONLY a JSON object, no other text:
{{"key_turns": [{{"turn": 0, "scores": {example0}}}, {{"turn": 5, "scores": {{...}}}}, ...]}}
Each score is a number in [0, 1]; turns are integers in 0..T; use the criterion ids as keys.
"""


def rubric_system_prompt(rubric: Rubric) -> str:
    """The system message of the rubric judge, with the rubric spelled out."""
    lines = "\n".join(
        f"- {c.id}: {c.title} ({c.weight:g}) — {c.description}" for c in rubric.criteria
    )
    example = json.dumps(dict.fromkeys((c.id for c in rubric.criteria), 0.0))
    return _SYSTEM.format(n=len(rubric.criteria), criteria=lines, example0=example)


def build_rubric_messages(
    traj: TrajectoryTurns,
    rubric: Rubric,
    context: TurnContext | None = None,
    *,
    max_chars: int = 24_000,
) -> list[dict[str, str]]:
    """The chat messages of one rubric-judge request."""
    n = len(traj.turns)
    instruction = (
        f'Now give the JSON object {{"key_turns": [...]}} scoring every criterion '
        f"({', '.join(c.id for c in rubric.criteria)}) at a few key points in 0..{n}."
    )
    user = render_trajectory(traj, context, max_chars=max_chars, instruction=instruction)
    return [
        {"role": "system", "content": rubric_system_prompt(rubric)},
        {"role": "user", "content": user},
    ]


# Parsing -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RubricAnswer:
    """What a rubric answer held: scores per key point, or why it is unusable."""

    scores: dict[int, dict[str, float]]
    """Point → criterion → score in [0, 1] (empty when unusable)."""
    error: str | None = None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _scores(raw: Any, ids: set[str]) -> dict[str, float]:
    if isinstance(raw, list):  # [{"criterion": id, "score": x}, ...]
        raw = {
            item.get("criterion", item.get("id")): item.get("score", item.get("value"))
            for item in raw
            if isinstance(item, Mapping)
        }
    if not isinstance(raw, Mapping):
        return {}
    out = {}
    for key, value in raw.items():
        number = _number(value)
        if key in ids and number is not None:
            out[key] = min(max(number, 0.0), 1.0)
    return out


def _from_candidate(value: Any, n_turns: int, ids: set[str]) -> RubricAnswer | None:
    items = value.get("key_turns", value.get("turns")) if isinstance(value, Mapping) else value
    if not isinstance(items, list):
        return None
    out: dict[int, dict[str, float]] = {}
    for item in items:
        if not isinstance(item, Mapping):
            continue
        turn = _number(item.get("turn", item.get("step")))
        if turn is None or turn != int(turn) or not 0 <= turn <= n_turns:
            continue
        scores = _scores(item.get("scores"), ids)
        if scores:
            out[int(turn)] = scores
    if not out:
        return RubricAnswer(
            {}, f"no key turn in 0..{n_turns} with a numeric score of a rubric criterion"
        )
    return RubricAnswer(out)


def parse_rubric_answer(text: str, n_turns: int, rubric: Rubric) -> RubricAnswer:
    """Per-point criterion scores from the judge's answer, or the reason it is unusable.

    Reads JSON in code fences or in prose; `scores` may be a mapping id → score or a list of
    `{"criterion", "score"}`; points outside 0..T, unknown criteria and non-numeric scores are
    dropped, scores clipped to [0, 1]; a point with no usable score is dropped.
    """
    ids = {c.id for c in rubric.criteria}
    first_error: str | None = None
    for candidate in json_candidates(text):
        answer = _from_candidate(candidate, n_turns, ids)
        if answer is None:
            continue
        if answer.error is None:
            return answer
        first_error = first_error or answer.error
    return RubricAnswer({}, first_error or 'no JSON object with a "key_turns" list in the answer')
