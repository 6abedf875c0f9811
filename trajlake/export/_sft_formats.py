"""SFT row formats: one function per trainer's dataset shape, from an `SftConversation`.

Every function returns a JSON-ready dict with a fixed key order (so output bytes are stable).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from trajlake.export._sft_select import SftConversation

TextFormat = Literal["openai", "trl", "sharegpt", "axolotl"]
SftFormat = Literal["openai", "trl", "sharegpt", "axolotl", "tokenized"]
SFT_FORMATS: tuple[str, ...] = ("openai", "trl", "sharegpt", "axolotl", "tokenized")


def _weight(w: float | None) -> float:
    return 0.0 if w is None else float(w)


def to_openai(conv: SftConversation) -> dict[str, Any]:
    """OpenAI chat fine-tuning row: `messages` (+ `tools`), a 0/1 `weight` on each assistant.

    The fine-tuning API takes only a binary weight, so any positive weight becomes 1. It
    rejects keys it does not know, so assistant `reasoning` and tool-message `name` are left out.
    """
    messages = []
    for m, w in zip(conv.messages, conv.weights, strict=True):
        out = {k: v for k, v in m.items() if k not in ("reasoning", "name")}
        if m["role"] == "assistant":
            out["weight"] = 1 if _weight(w) > 0 else 0
        messages.append(out)
    return {"messages": messages, "tools": conv.tools}


def to_trl(conv: SftConversation) -> dict[str, Any]:
    """TRL SFTTrainer conversational row: `messages` and `tools` as its chat template takes them.

    `message_weights` (one float per message, 0.0 for messages not trained) is a side column
    for a weighted-loss collator; SFTTrainer itself ignores columns it does not use.
    """
    return {
        "messages": conv.messages,
        "tools": conv.tools,
        "message_weights": [_weight(w) for w in conv.weights],
        "trajectory_id": conv.trajectory_id,
    }


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _function_call(m: dict[str, Any]) -> str:
    calls = [
        {"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])}
        for c in m["tool_calls"]
    ]
    return json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)


_PROMPT_TAGS = {"user": "human", "tool": "observation"}


def _response_entry(m: dict[str, Any]) -> tuple[str, str]:
    if m.get("tool_calls"):
        return "function_call", _function_call(m)
    return "gpt", m["content"] or ""


def _merge_response(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two assistant turns in a row become one: calls are concatenated, texts joined."""
    if a["from"] == "function_call" or b["from"] == "function_call":
        calls: list[Any] = []
        for entry in (a, b):
            if entry["from"] == "function_call":
                value = json.loads(entry["value"])
                calls.extend(value if isinstance(value, list) else [value])
        merged = json.dumps(calls if len(calls) > 1 else calls[0], ensure_ascii=False)
        return {"from": "function_call", "value": merged}
    return {"from": "gpt", "value": a["value"] + "\n" + b["value"]}


def to_sharegpt(conv: SftConversation) -> dict[str, Any]:
    """LLaMA-Factory ShareGPT row with tool roles: `conversations`, `tools` (a JSON string).

    LLaMA-Factory needs, after an optional system turn, prompt turns (human, observation) and
    response turns (gpt, function_call) to alternate, starting with a prompt and ending with a
    response; it drops other rows. So consecutive prompt turns merge into one (keeping the first
    one's role), consecutive assistant turns merge into one (their tool calls concatenated; the
    text of a turn that calls tools is not carried: the format has no place for it), and what
    follows the last assistant turn — it carries no loss — is left out. `weights` is aligned
    with `conversations` (0.0 where not trained; a merged response takes the larger weight).
    """
    system: list[dict[str, str]] = []
    turns: list[dict[str, str]] = []
    weights: list[float] = []
    for m, w in zip(conv.messages, conv.weights, strict=True):
        role = m["role"]
        if role == "system" and not turns and not system:
            system.append({"from": "system", "value": m["content"] or ""})
            continue
        if role == "assistant":
            tag, value = _response_entry(m)
            entry = {"from": tag, "value": value}
            if not turns:
                continue  # a response with no prompt before it cannot be trained on
            if turns[-1]["from"] in ("gpt", "function_call"):
                turns[-1] = _merge_response(turns[-1], entry)
                weights[-1] = max(weights[-1], _weight(w))
                continue
        else:
            entry = {"from": _PROMPT_TAGS.get(role, "human"), "value": m["content"] or ""}
            if turns and turns[-1]["from"] in ("human", "observation"):
                turns[-1]["value"] += "\n" + entry["value"]
                continue
        turns.append(entry)
        weights.append(_weight(w))
    while turns and turns[-1]["from"] in ("human", "observation"):
        turns.pop()
        weights.pop()
    return {
        "conversations": system + turns,
        "tools": json.dumps(conv.tools, ensure_ascii=False),
        "weights": [0.0] * len(system) + weights,
        "trajectory_id": conv.trajectory_id,
    }


def to_axolotl(conv: SftConversation) -> dict[str, Any]:
    """Axolotl `chat_template` row: `messages` each with a `weight` and a `train` flag, `tools`.

    Point the dataset's message training field at `train` to train on exactly the weighted
    assistant turns.
    """
    messages = [
        {**m, "weight": _weight(w), "train": _weight(w) > 0}
        for m, w in zip(conv.messages, conv.weights, strict=True)
    ]
    return {"messages": messages, "tools": conv.tools, "trajectory_id": conv.trajectory_id}


FORMATTERS: dict[str, Callable[[SftConversation], dict[str, Any]]] = {
    "openai": to_openai,
    "trl": to_trl,
    "sharegpt": to_sharegpt,
    "axolotl": to_axolotl,
}


STEP_LOSS_MASK_DEFAULT: dict[str, bool] = {
    "openai": False,
    "trl": True,
    "sharegpt": False,
    "axolotl": True,
}
"""Formats that carry `step_loss_mask` unless told otherwise: not where a reader validates keys
(OpenAI's fine-tuning API rejects unknown ones) or where the format has its own (ShareGPT)."""


def add_step_loss_mask(format: str, row: dict[str, Any]) -> dict[str, Any]:
    """Put `step_loss_mask` (1 = train, 0 = not: Orchard's per-message field) on each message.

    Derived from the row's own weights, so it can never disagree with them.
    """
    if format == "sharegpt":
        row["conversations"] = [
            {**entry, "step_loss_mask": int(w > 0)}
            for entry, w in zip(row["conversations"], row["weights"], strict=True)
        ]
        return row
    messages = []
    for i, m in enumerate(row["messages"]):
        if format == "trl":
            trained = row["message_weights"][i] > 0
        elif format == "axolotl":
            trained = bool(m["train"])
        else:  # openai: only assistant messages carry a weight
            trained = bool(m.get("weight"))
        messages.append({**m, "step_loss_mask": int(trained)})
    row["messages"] = messages  # new dicts: the conversation's own messages stay as they are
    return row


def encode_row(row: dict[str, Any]) -> str:
    """One JSONL line: insertion key order, UTF-8 as is."""
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"))
