"""Deterministic synthetic rollouts shaped like real SWE-agent trajectories.

Used by tests, benchmarks and the bundled quick-start data: a system prompt, an issue,
then turns of reasoning + a tool call + a tool observation, with realistic text sizes, token
counts, a final patch and an outcome. The same seed always gives the same records.
Unlike `trajlake.synth` it has no hidden dynamics or ground truth: it is for realistic shapes and
sizes (storage, ingest and export benchmarks), not for measuring credit.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Iterator
from typing import Any

_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in the repository.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "str_replace_editor",
            "description": "View or edit a file.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "path": {"type": "string"},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"},
                },
                "required": ["command", "path"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "submit", "description": "Submit the patch.", "parameters": {}},
    },
]
_WORDS = [
    "the",
    "function",
    "returns",
    "value",
    "when",
    "input",
    "is",
    "none",
    "so",
    "we",
    "should",
    "check",
    "the",
    "branch",
    "before",
    "calling",
    "parse",
    "config",
    "path",
    "module",
    "test",
    "error",
    "raise",
    "fix",
    "handle",
    "empty",
    "list",
    "index",
    "return",
]
_REPOS = ["django/django", "sympy/sympy", "astropy/astropy", "pytest-dev/pytest", "psf/requests"]
_HARNESSES = [("swe-agent", "1.1.0"), ("openhands", "0.51"), ("mini-swe-agent", "1.9")]
_MODELS = ["qwen3-coder-30b", "gpt-5-mini", "claude-sonnet-4.5"]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _code_block(rng: random.Random, lines: int) -> str:
    return "\n".join(
        f"{i + 1:4d}    {'    ' * rng.randint(0, 3)}{_text(rng, rng.randint(3, 12))}"
        for i in range(lines)
    )


def _tool_call(rng: random.Random, turn: int, last: bool) -> tuple[str, dict[str, Any]]:
    if last:
        return "submit", {}
    if rng.random() < 0.55:
        cmd = rng.choice(["grep -rn", "python -m pytest -x", "ls", "cat", "git diff"])
        return "bash", {"command": f"{cmd} {_text(rng, 2).replace(' ', '_')}.py"}
    return "str_replace_editor", {
        "command": rng.choice(["view", "str_replace"]),
        "path": f"/repo/src/{_text(rng, 1)}.py",
        "old_str": _text(rng, 6),
        "new_str": _text(rng, 7),
    }


def sample_trajectory(index: int, *, seed: int = 0, turns: int | None = None) -> dict[str, Any]:
    """One canonical trajectory (a canonical JSONL dict), deterministic in (index, seed)."""
    rng = random.Random(seed * 1_000_003 + index)
    task_index = index // 4  # four attempts per task, as in best-of-n sampling
    repo = _REPOS[task_index % len(_REPOS)]
    harness, harness_version = _HARNESSES[index % len(_HARNESSES)]
    model = _MODELS[(index // 3) % len(_MODELS)]
    n_turns = turns if turns is not None else rng.randint(3, 24)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=index)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a software engineering agent. " + _text(rng, 60)},
        {"role": "user", "content": f"<issue>\n{_text(rng, rng.randint(60, 250))}\n</issue>"},
    ]
    prompt = 900
    for turn in range(n_turns):
        name, args = _tool_call(rng, turn, last=turn == n_turns - 1)
        call_id = f"call_{index}_{turn}"
        completion = rng.randint(40, 400)
        prompt += completion + rng.randint(200, 1500)
        messages.append(
            {
                "role": "assistant",
                "content": _text(rng, rng.randint(10, 80)),
                "reasoning": _text(rng, rng.randint(20, 120)) if rng.random() < 0.5 else None,
                "tool_calls": [
                    {"id": call_id, "name": name, "arguments": json.dumps(args), "type": "function"}
                ],
                "model": model,
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "timestamp": (start + dt.timedelta(seconds=20 * turn)).isoformat(),
            }
        )
        failed = rng.random() < 0.15
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "name": name,
                "content": _code_block(rng, rng.randint(2, 60)),
                "is_error": failed,
                "exit_code": 1 if failed else 0,
            }
        )
    resolved = rng.random() < 0.35 + 0.1 * (index % 3)
    return {
        "trajectory_id": f"sample-{seed}-{index:07d}",
        "task_id": f"{repo.replace('/', '__')}-{1000 + task_index}",
        "task_source": "swe-bench-verified",
        "harness": harness,
        "harness_version": harness_version,
        "policy_model": model,
        "run_id": f"run-{seed}",
        "stage": "eval",
        "group_id": f"g-{task_index}",
        "attempt": index % 4,
        "started_at": start.isoformat(),
        "ended_at": (start + dt.timedelta(seconds=20 * n_turns)).isoformat(),
        "status": "completed",
        "resolved": resolved,
        "reward": 1.0 if resolved else 0.0,
        "outcome_source": "swebench-harness",
        "final_output": f"diff --git a/src/x.py b/src/x.py\n+{_text(rng, 8)}\n",
        "tools": _TOOLS,
        "source_format": "canonical",
        "attrs": {"instance_id": f"{repo}#{1000 + task_index}", "temperature": 0.7},
        "messages": messages,
    }


def sample_trajectories(count: int, *, seed: int = 0, start: int = 0) -> Iterator[dict[str, Any]]:
    """`count` canonical trajectories, indices `start`… (same arguments, same records)."""
    for index in range(start, start + count):
        yield sample_trajectory(index, seed=seed)
