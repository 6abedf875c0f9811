"""SFT selection: trajectories at a snapshot → chat conversations with per-message loss weights.

Reads the lake a chunk at a time (`iter_canonical`), joins the credits of one run by
(trajectory_id, turn) at the snapshot that holds the run, and dedupes by content hash.

Text actions: harnesses without structured tool calls (mini-swe-agent, SWE-agent's text-parsed
configurations) are stored with a parsed `ToolCall` on the assistant message and the observation
kept as the `user` message the model saw, carrying the call's `tool_call_id`. So a trajectory's
actions are *text actions* when a main-thread `user` message answers a call and no message has
role `tool` (native tool calling always answers with `tool` messages). `actions="native"` exports
what such an agent emitted (its text, no tool calls); `"tool-calls"` converts: the parsed calls
stay on the assistant messages and the answering `user` messages become `tool` messages.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from trajlake.errors import MaskRuleMismatch, NoSuchCreditRun, TrajlakeError
from trajlake.export._sft_credit import check_run_saw, resolve_credit
from trajlake.export.jsonl import iter_canonical
from trajlake.query import sql

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

Split = Literal["train", "val"]
Actions = Literal["native", "tool-calls"]
ACTIONS: tuple[str, ...] = ("native", "tool-calls")
DropReason = Literal["untrained", "duplicate", "no_credit_rows", "too_long"]
"""Why a selected trajectory is not in an export (counted per split in the manifest)."""

_CHUNK = 500


@dataclass(frozen=True)
class SftConversation:
    """One trajectory's main thread as an OpenAI-shaped chat with per-message loss weights.

    `weights[i]` is None for non-assistant messages and for copied context, else the assistant
    turn's loss weight (credit run: weight if mask else 0.0, and 0.0 below `min_weight`;
    without a credit run: 1.0). `turns[i]` is the message's agent turn (None when unknown).
    `trained_tokens` sums the stored completion tokens of trained turns (None when unknown).
    `text_actions`: the trajectory's actions were text the agent wrote (module docstring).
    """

    trajectory_id: str
    task_id: str | None
    content_hash: str | None
    resolved: bool | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    weights: list[float | None]
    turns: list[int | None]
    trained_tokens: int | None = None
    text_actions: bool = False

    @property
    def trained_messages(self) -> int:
        """Messages with a positive weight."""
        return sum(1 for w in self.weights if w is not None and w > 0)


def split_of(task_id: str, seed: int, val_frac: float) -> Split:
    """Deterministic split of a task: sha256 of `seed:task` as a uniform number in [0, 1).

    Callers pass the task id, so every rollout of a task lands in the same split; a
    trajectory without a task id is passed by its trajectory id (its own one-rollout task).
    """
    if not 0.0 <= val_frac < 1.0:
        raise ValueError(f"val_frac must be in [0, 1), got {val_frac}")
    digest = hashlib.sha256(f"{seed}:{task_id}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return "val" if u < val_frac else "train"


def credit_run_params(lake: LakeStore, run: str, *, at: SnapshotRef = None) -> dict[str, Any]:
    """The stored parameters of credit run `run` (NoSuchCreditRun naming the runs available)."""
    rows = sql(
        lake, "SELECT any_value(params) AS params FROM credits WHERE run_name = ?", [run], at=at
    ).to_dicts()
    if not rows or rows[0]["params"] is None:
        names = [
            r["run_name"]
            for r in sql(
                lake, "SELECT DISTINCT run_name FROM credits ORDER BY run_name", at=at
            ).to_dicts()
        ]
        available = ", ".join(names) if names else "none (compute one with `trajlake credit`)"
        raise NoSuchCreditRun(
            f"no credit run named {run!r} at this snapshot; available: {available}"
        )
    params: dict[str, Any] = json.loads(rows[0]["params"])
    return params


def check_mask_rule(
    lake: LakeStore, credit: str | None, mask: str | None, *, at: SnapshotRef
) -> str:
    """The mask rule in force: the credit run's stored rule (`mask`, if given, must equal it).

    Masks are not recomputed at export: the run's stored mask/weight are what was reviewed
    and what the diagnostics describe. Without a credit run the rule is `all`.
    """
    if credit is None:
        if mask not in (None, "all"):
            raise ValueError(f"--mask {mask!r} needs --credit RUN_NAME (without a run: all)")
        return "all"
    stored = str(credit_run_params(lake, credit, at=at).get("mask"))
    if mask is not None and mask != stored:
        raise MaskRuleMismatch(
            f"credit run {credit!r} stored masks with rule {stored!r}, not {mask!r}; drop "
            f"--mask or compute a run with that rule (`trajlake credit --mask {mask}`)"
        )
    return stored


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call.get("id"),
        "type": "function",
        "function": {"name": call.get("name"), "arguments": call.get("arguments") or ""},
    }


def has_text_actions(messages: Iterable[dict[str, Any]]) -> bool:
    """Whether a trajectory's calls were parsed from text: its results are `user` messages."""
    answered_by_user = False
    for m in messages:
        if m.get("thread", "main") != "main":
            continue
        if m["role"] == "tool":
            return False
        answered_by_user = answered_by_user or (m["role"] == "user" and bool(m.get("tool_call_id")))
    return answered_by_user


def to_chat_message(
    m: dict[str, Any], *, text_actions: bool = False, actions: Actions = "native"
) -> dict[str, Any]:
    """A canonical message in OpenAI chat shape (fixed key order, no lake bookkeeping).

    For a trajectory with text actions, `native` leaves out the parsed tool calls (the text holds
    the action) and `tool-calls` turns the `user` messages answering a call into `tool` messages.
    """
    role = m["role"]
    if text_actions and actions == "tool-calls" and role == "user" and m.get("tool_call_id"):
        role = "tool"
    out: dict[str, Any] = {"role": role, "content": m.get("content")}
    if role == "assistant":
        if m.get("reasoning"):
            out["reasoning"] = m["reasoning"]
        if m.get("tool_calls") and not (text_actions and actions == "native"):
            out["tool_calls"] = [_tool_call(c) for c in m["tool_calls"]]
    elif role == "tool":
        out["tool_call_id"] = m.get("tool_call_id")
        out["name"] = m.get("name")
    if out["content"] is None:
        out["content"] = ""
    return out


def _conversation(
    obj: dict[str, Any],
    turn_weights: dict[int, float] | None,
    min_weight: float,
    actions: Actions = "native",
) -> SftConversation:
    text_actions = has_text_actions(obj["messages"])
    messages: list[dict[str, Any]] = []
    weights: list[float | None] = []
    turns: list[int | None] = []
    tokens: int | None = 0
    for m in obj["messages"]:
        if m.get("thread", "main") != "main":
            continue
        messages.append(to_chat_message(m, text_actions=text_actions, actions=actions))
        turns.append(m.get("turn"))
        if m["role"] != "assistant" or m.get("is_copied_context"):
            weights.append(None)
            continue
        if turn_weights is None:
            w = 1.0
        else:
            if m.get("turn") not in turn_weights:
                raise TrajlakeError(
                    f"credit run has no row for turn {m.get('turn')} of trajectory "
                    f"{obj['trajectory_id']!r}; the run does not match the messages"
                )
            w = turn_weights[m["turn"]]
        w = w if w >= min_weight else 0.0
        weights.append(w)
        if w > 0 and tokens is not None:
            tokens = None if m.get("completion_tokens") is None else tokens + m["completion_tokens"]
    return SftConversation(
        trajectory_id=obj["trajectory_id"],
        task_id=obj.get("task_id"),
        content_hash=obj.get("content_hash"),
        resolved=obj.get("resolved"),
        messages=messages,
        tools=list(obj.get("tools") or []),
        weights=weights,
        turns=turns,
        trained_tokens=tokens,
        text_actions=text_actions,
    )


def credit_weights(
    lake: LakeStore, run: str, ids: list[str], *, at: SnapshotRef
) -> dict[str, dict[int, float]]:
    """(trajectory → turn → weight if mask else 0.0) for the main thread of run `run`."""
    rows = sql(
        lake,
        "SELECT trajectory_id, turn, CASE WHEN mask THEN weight ELSE 0.0 END AS w FROM credits "
        "WHERE run_name = ? AND thread = 'main' AND trajectory_id IN (SELECT unnest(?::VARCHAR[]))",
        [run, ids],
        at=at,
    ).rows()
    out: dict[str, dict[int, float]] = {}
    for tid, turn, w in rows:
        out.setdefault(tid, {})[int(turn)] = float(w or 0.0)
    return out


def _chunks(items: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= _CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _label(lake: LakeStore, snapshot: int) -> str:
    """How a command line names `snapshot`: its first tag, else its id."""
    tags = sorted(t.name for t in lake.tags() if t.snapshot_id == snapshot)
    return tags[0] if tags else str(snapshot)


DropFn = Callable[[dict[str, Any], DropReason], None]
"""Told about each selected trajectory left out (its canonical object and why)."""


def select_conversations(
    lake: LakeStore,
    *,
    at: SnapshotRef = None,
    where: str | None = None,
    credit: str | None = None,
    min_weight: float = 0.0,
    dedupe: bool = True,
    actions: Actions = "native",
    on_drop: DropFn | None = None,
) -> Iterator[SftConversation]:
    """SFT conversations of the trajectories matching `where` at snapshot `at`, by id.

    Args:
        lake: The lake.
        at: Snapshot (id, tag, timestamp); pinned once for the whole read.
        where: SQL condition on `trajectories`.
        credit: Credit run whose weight×mask weights the assistant turns (default: all 1.0),
            read at `at` or, when computed later, at the snapshot it was committed in (checked
            to have read the same trajectory content: `_sft_credit`). Trajectories the run has
            no rows for are left out (`on_drop`, reason `no_credit_rows`).
        min_weight: Turns weighted below this get weight 0.
        dedupe: Keep only the first trajectory (by id) of each content hash (others: `on_drop`,
            reason `duplicate`).
        actions: `native` or `tool-calls` for trajectories with text actions (module docstring).
        on_drop: Called with each trajectory left out and the reason.
    """
    if actions not in ACTIONS:
        raise ValueError(f"actions must be one of {', '.join(ACTIONS)}, got {actions!r}")
    snapshot = lake.snapshot(at).snapshot_id
    label = at if isinstance(at, str) and at != "latest" else _label(lake, snapshot)
    source = resolve_credit(lake, credit, snapshot) if credit is not None else None
    dropped = on_drop or (lambda obj, reason: None)
    seen: set[str] = set()
    for chunk in _chunks(iter_canonical(lake, at=snapshot, where=where)):
        weights = None
        if source is not None:
            check_run_saw(lake, source, snapshot, label, chunk)
            ids = [o["trajectory_id"] for o in chunk]
            weights = credit_weights(lake, source.run, ids, at=source.snapshot)
        for obj in chunk:
            digest = obj.get("content_hash")
            if dedupe and digest:
                if digest in seen:
                    dropped(obj, "duplicate")
                    continue
                seen.add(digest)
            turn_weights = None if weights is None else weights.get(obj["trajectory_id"])
            if weights is not None and turn_weights is None:
                dropped(obj, "no_credit_rows")
                continue
            yield _conversation(obj, turn_weights, min_weight, actions)
