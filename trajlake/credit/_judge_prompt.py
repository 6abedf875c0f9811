"""The retrospective judge's prompt, the parsing of its answer and the interpolation of key turns.

Pure functions, no I/O: `build_messages` renders one trajectory into a chat request,
`parse_estimates` reads the judge's sparse key-turn estimates back, `interpolate` turns them into
V(s_0) … V(s_T).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trajlake.credit._types import TrajectoryTurns

PROMPT_VERSION = "judge-v1"
"""Part of every cache key: change it whenever the prompt or its parsing changes meaning."""

SYSTEM_PROMPT = """\
You are a retrospective value estimator for software-engineering agent trajectories.
You see a complete trajectory of an agent working on a task, and the final outcome
(whether the task was eventually solved). Using hindsight, estimate for a few KEY turns
the probability that the agent would eventually succeed, judged from the state right after
that turn: P(success | history up to and including turn t).

Point 0 means the state before the agent's first action (the prior). Point t (1..T) means
the state right after turn t. Pick the turns where the estimate changes most: progress such as
locating the bug, reproducing it, a correct fix, passing tests; setbacks such as wrong
directions, broken edits, giving up. Include point 0 if you can. Give between 2 and 8 points.

Answer with ONLY a JSON object, no other text:
{"estimates": [{"turn": 0, "value": 0.3}, {"turn": 4, "value": 0.6}, ...]}
Each value is a probability in [0, 1]; turns are integers in 0..T.
"""


@dataclass(frozen=True)
class TurnContext:
    """Text the prompt can show besides the actions: the task and per-turn observations."""

    task: str | None = None
    observations: Mapping[int, str] | None = None
    """Observation text by 0-based turn."""


def truncate_middle(text: str, limit: int) -> str:
    """Keep the head and tail of `text` within `limit` characters, marking what was cut."""
    if len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} characters omitted ...]\n"
    keep = max(limit - len(marker), 0)
    head = (keep + 1) // 2
    tail = keep - head
    return text[:head] + marker + (text[len(text) - tail :] if tail else "")


def _outcome_text(outcome: float) -> str:
    if outcome >= 1.0:
        return "SUCCESS (the task was resolved; final value 1.0)"
    if outcome <= 0.0:
        return "FAILURE (the task was not resolved; final value 0.0)"
    return f"partial reward {outcome:g} (on a 0..1 scale)"


def render_trajectory(
    traj: TrajectoryTurns,
    context: TurnContext | None = None,
    *,
    max_chars: int = 24_000,
    instruction: str | None = None,
) -> str:
    """The user message: task, numbered turns (action, observation), outcome, within `max_chars`.

    Each turn gets an equal share of the budget; a longer turn is cut in its middle, so the
    command and the end of its output (where errors and test summaries sit) survive. The last
    line is `instruction` (default: the request for the key-point estimates).
    """
    context = context or TurnContext()
    n = len(traj.turns)
    task = truncate_middle(context.task or "", max(max_chars // 6, 200)) if context.task else ""
    outcome = _outcome_text(float(traj.outcome if traj.outcome is not None else 0.0))
    head = [f"Task id: {traj.task_id or 'unknown'}"]
    if task:
        head.append(f"=== TASK ===\n{task}\n=== END TASK ===")
    head.append(f"The trajectory has T = {n} turns.")
    tail = [
        f"=== FINAL OUTCOME ===\n{outcome}",
        instruction
        or f'Now give the JSON object {{"estimates": [...]}} for a few key points in 0..{n}.',
    ]
    fixed = sum(len(s) + 2 for s in head + tail) + 60
    per_turn = max((max_chars - fixed) // max(n, 1) - 40, 160)
    observations = context.observations or {}
    body = ["=== TRAJECTORY ==="]
    for k, turn in enumerate(traj.turns, start=1):
        parts = [f"ACTION:\n{turn.action_text.strip()}"]
        obs = observations.get(turn.turn)
        if obs:
            parts.append(f"OBSERVATION:\n{obs.strip()}")
        if turn.is_error:
            parts.append("(the observation reported an error)")
        body.append(f"--- Turn {k} ---\n" + truncate_middle("\n".join(parts), per_turn))
    body.append("=== END TRAJECTORY ===")
    return "\n\n".join(head + body + tail)


def build_messages(
    traj: TrajectoryTurns, context: TurnContext | None = None, *, max_chars: int = 24_000
) -> list[dict[str, str]]:
    """The chat messages of one judge request."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": render_trajectory(traj, context, max_chars=max_chars)},
    ]


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def json_candidates(text: str) -> list[Any]:
    """Every JSON value the text may hold: fenced blocks, the whole text, embedded objects."""
    found: list[Any] = []
    chunks = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for chunk in chunks:
        chunk = chunk.strip()
        try:
            found.append(json.loads(chunk))
            continue
        except ValueError:
            pass
        for start in (i for i, ch in enumerate(chunk) if ch in "{["):
            try:
                value, _ = decoder.raw_decode(chunk, start)
            except ValueError:
                continue
            found.append(value)
    return found


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip().rstrip("%"))
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _estimates_from(value: Any, n_turns: int) -> dict[int, float] | None:
    items = value.get("estimates") if isinstance(value, dict) else value
    if not isinstance(items, list):
        return None
    out: dict[int, float] = {}
    for item in items:
        if not isinstance(item, dict):
            continue
        turn = _as_number(item.get("turn", item.get("step")))
        prob = _as_number(item.get("value", item.get("p", item.get("probability"))))
        if turn is None or prob is None or turn != int(turn) or not 0 <= turn <= n_turns:
            continue
        out[int(turn)] = min(max(prob, 0.0), 1.0)
    return out or None


def parse_estimates(text: str, n_turns: int) -> dict[int, float] | None:
    """Key-point estimates {point: probability} from the judge's answer, or None if unusable.

    Accepts JSON in code fences or surrounded by prose; entries with a point outside 0..T or a
    non-numeric value are dropped; values are clipped to [0, 1].
    """
    for candidate in json_candidates(text):
        estimates = _estimates_from(candidate, n_turns)
        if estimates is not None:
            return estimates
    return None


def interpolate(estimates: Mapping[int, float], n_turns: int, outcome: float) -> list[float]:
    """V(s_0) … V(s_T) from sparse key points: linear between them, V(s_T) = outcome.

    Before the first key point the value is held at that point's value (no prior given means no
    slope to extrapolate); the outcome always anchors point T.
    """
    anchors = {k: min(max(v, 0.0), 1.0) for k, v in estimates.items() if 0 <= k < n_turns}
    anchors[n_turns] = min(max(outcome, 0.0), 1.0)
    points = sorted(anchors)
    values: list[float] = []
    for t in range(n_turns + 1):
        if t <= points[0]:
            values.append(anchors[points[0]])
            continue
        right = next(p for p in points if p >= t)
        left = max(p for p in points if p < t) if right != t else t
        if left == right:
            values.append(anchors[t])
        else:
            frac = (t - left) / (right - left)
            values.append(anchors[left] + frac * (anchors[right] - anchors[left]))
    return values


def response_text(body: Any) -> str | None:
    """The assistant text of a chat-completions response body."""
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None


def outcome_broadcast(n_turns: int, outcome: float) -> list[float]:
    """The fallback: every V(s_t) equals the outcome."""
    return [min(max(outcome, 0.0), 1.0)] * (n_turns + 1)
