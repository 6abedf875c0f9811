"""Rows of the RL groups export: one per rollout of a kept group, and the Parquet shards.

A row carries what a trainer needs without the lake: the group, the reward and both
advantages, the conversation as OpenAI-shaped chat JSON, and — when the lake holds token ids
for every assistant message (token-faithful RL data, e.g. Orchard dumps) — the token sequence
with its loss mask.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from trajlake.export._bar import Candidate
from trajlake.export._sft_output import ParquetShards
from trajlake.export._sft_select import to_chat_message
from trajlake.ingest.orchard_rl import rollout_tokens

GROUP_SCHEMA = pa.schema(
    [
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("task_id", pa.string()),
        pa.field("trajectory_id", pa.string(), nullable=False),
        pa.field("position", pa.int32(), nullable=False),
        pa.field("group_size", pa.int32(), nullable=False),
        pa.field("group_successes", pa.int32(), nullable=False),
        pa.field("reward", pa.float64(), nullable=False),
        pa.field("success", pa.bool_(), nullable=False),
        pa.field("advantage_grpo", pa.float64(), nullable=False),
        pa.field("advantage_rloo", pa.float64(), nullable=False),
        pa.field("status", pa.string()),
        pa.field("aborted", pa.bool_(), nullable=False),
        pa.field("relaxed", pa.bool_(), nullable=False),
        pa.field("n_turns", pa.int32()),
        pa.field("response_tokens", pa.int64()),
        pa.field("response_chars", pa.int64(), nullable=False),
        pa.field("policy_model", pa.string()),
        pa.field("messages", pa.string(), nullable=False),
        pa.field("tools", pa.string(), nullable=False),
        pa.field("final_output", pa.string()),
        pa.field("token_ids", pa.list_(pa.int32())),
        pa.field("loss_mask", pa.list_(pa.int8())),
    ]
)
"""One row per rollout of a kept group (see docs/rl-groups.md for each column)."""


def response_chars(messages: Sequence[dict[str, Any]]) -> int:
    """Characters the policy wrote in the main thread: content, reasoning, tool arguments."""
    total = 0
    for m in messages:
        if m["role"] != "assistant" or m.get("thread", "main") != "main":
            continue
        total += len(m.get("content") or "") + len(m.get("reasoning") or "")
        total += sum(len(c.get("arguments") or "") for c in m.get("tool_calls") or ())
    return total


def token_sequence(messages: Sequence[dict[str, Any]]) -> tuple[list[int], list[int]] | None:
    """(token ids, loss mask) of the main thread: the messages' `token_ids` in order, masked 1
    on assistant tokens; None unless every assistant message has token ids (a partial
    sequence would train on a conversation the policy never saw)."""
    main = [m for m in messages if m.get("thread", "main") == "main"]
    assistants = [m for m in main if m["role"] == "assistant"]
    if not assistants or any(m.get("token_ids") is None for m in assistants):
        return None
    ids: list[int] = []
    mask: list[int] = []
    for m in main:
        tokens = m.get("token_ids") or []
        ids.extend(tokens)
        trained = m["role"] == "assistant" and not m.get("is_copied_context")
        mask.extend([1 if trained else 0] * len(tokens))
    return ids, mask


def rollout_row(
    trajectory: dict[str, Any],
    member: Candidate,
    *,
    group_id: str,
    task_id: str | None,
    position: int,
    rewards: Sequence[float],
    grpo: float,
    rloo: float,
    relaxed: bool,
) -> dict[str, Any]:
    """The export row of one kept rollout (`trajectory`: its canonical object)."""
    messages = trajectory["messages"]
    chat = [to_chat_message(m) for m in messages if m.get("thread", "main") == "main"]
    tokens = token_sequence(messages)
    whole = rollout_tokens(trajectory) if tokens is None else None
    if whole is not None:  # an Orchard rollout whose token runs did not split per message
        prompt, response, loss_mask = whole
        tokens = [*prompt, *response], [0] * len(prompt) + loss_mask
    return {
        "group_id": group_id,
        "task_id": task_id,
        "trajectory_id": member.trajectory_id,
        "position": position,
        "group_size": len(rewards),
        "group_successes": sum(1 for r in rewards if r > 0),
        "reward": member.reward,
        "success": member.success,
        "advantage_grpo": grpo,
        "advantage_rloo": rloo,
        "status": member.status,
        "aborted": member.aborted,
        "relaxed": relaxed,
        "n_turns": trajectory.get("n_turns"),
        "response_tokens": trajectory.get("completion_tokens"),
        "response_chars": response_chars(messages),
        "policy_model": trajectory.get("policy_model"),
        "messages": json.dumps(chat, ensure_ascii=False, sort_keys=False),
        "tools": json.dumps(trajectory.get("tools") or [], ensure_ascii=False),
        "final_output": trajectory.get("final_output"),
        "token_ids": None if tokens is None else tokens[0],
        "loss_mask": None if tokens is None else tokens[1],
    }


def group_shards(fs: Any, root: str, split: str, limit: int) -> ParquetShards:
    """The shards of one split of a groups export (`write_rows` takes one whole group)."""
    return ParquetShards(fs, root, split, limit, schema=GROUP_SCHEMA)
