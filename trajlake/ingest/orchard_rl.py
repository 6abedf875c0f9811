"""Orchard-style RL rollout dumps: one JSON object per rollout, rewards in a sibling file.

A rollout file holds `messages` (OpenAI chat), `model_patch`, `exit_status`,
`prompt_token_ids`, `response_token_ids` and `loss_mask` (one 0/1 per response token; 1 on
tokens the policy generated). Optional keys: `instance_id`/`task_id`, `rollout_id`/`id`,
`group_id`, `model`, `tokenizer`, `reward`, `resolved`, `metadata`; any other key is kept
in `attrs`. Detection is by structure: a `messages` list beside the three token lists.

Token ids land on `messages.token_ids`. The full sequence is prompt + response, masked 0 on
the prompt; its runs of equal mask alternate like the messages' blocks (a block: consecutive
assistant messages, or consecutive other messages). Each 1-run is one assistant message's
generated tokens (`completion_tokens` = its length); each 0-run is the context block before
the next generation and is stored on the block's last message (the lake cannot split a
rendered span between messages without the tokenizer; earlier messages of the block keep
`token_ids` null). So concatenating the main thread's `token_ids` in order gives prompt +
response back, and the loss mask is 1 exactly on assistant messages' tokens
(`rollout_tokens` does this). When runs and blocks do not line up (two assistant messages in
a row, a masked tail), the three lists are kept whole under `attrs.orchard_rl.token_ids`
instead, with the reason in `attrs.orchard_rl.token_split`.

Rewards: `rewards.json` (an object: key → number, or → {reward, resolved}) or
`rewards.jsonl` (lines {rollout_id | id | file, reward, resolved?}) in the rollout's folder
or its parent. A key is the rollout id, else the file's stem (`rollout_03` for
`rollout_03.json`; `<folder>/<stem>` for a rewards file in the parent folder). A reward
inside the rollout is used when no rewards file has one. `resolved` is the given verdict,
else reward > 0. A rollout without any reward is stored without outcome and reported (the
ingest report's `problems`, and `attrs.orchard_rl.reward_missing`). Ingest redaction does
not rewrite token ids: decoded, they still hold what the model saw.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any, ClassVar

import fsspec

from trajlake.ingest._adapter import BadRecord, Parsed, bounded, loads, stable_id, to_parsed
from trajlake.ingest._keys import KeyStructure, scan_keys
from trajlake.ingest._limits import current_watch
from trajlake.ingest._models import finish_model_fields
from trajlake.ingest._sources import SourceFile
from trajlake.ingest.mini_swe_agent import exit_status_to_status
from trajlake.wire.chat import chat_message, name_tool_results
from trajlake.wire.values import as_bool, as_number, drop_none, first_str

FORMAT = "orchard-rl"
REWARDS_FILES = ("rewards.json", "rewards.jsonl")
"""Names of the sibling rewards file, looked up in this order."""
TOKEN_KEYS = ("prompt_token_ids", "response_token_ids", "loss_mask")
_MAPPED = frozenset(
    {"messages", "model_patch", "exit_status", *TOKEN_KEYS, "instance_id", "task_id"}
    | {"rollout_id", "id", "group_id", "model", "tokenizer", "reward", "resolved", "metadata"}
)
_LISTS = ("messages", *TOKEN_KEYS)
_CHAT_STARTS = (b'{"messages"', b'{"tools"', b'{"metadata"')
"""How a cut first line starts that the chat-messages adapter claims."""
_HEAD_KEY = re.compile(rb'"(prompt_token_ids|response_token_ids|loss_mask|messages)"\s*:\s*\[')
_REWARD_ID_KEYS = ("rollout_id", "id", "file")
_rewards_cache: dict[tuple[str, Any], tuple[dict[str, dict[str, Any]], str | None]] = {}


def _keys_match(keys: KeyStructure) -> bool:
    kinds = keys.shape.kinds
    return keys.container == "object" and all(kinds.get(k) == "array" for k in _LISTS)


class OrchardRlAdapter:
    """Reads Orchard-style RL rollouts (one JSON per rollout, token ids and loss mask kept)."""

    name: ClassVar[str] = FORMAT
    description: ClassVar[str] = (
        "*.json — Orchard-style RL rollouts {messages, model_patch, exit_status, "
        "prompt_token_ids, response_token_ids, loss_mask} + sibling rewards.json(l)"
    )

    def sniff(self, source: SourceFile, head: bytes, keys: KeyStructure | None = None) -> float:
        """Sure when the top-level object has `messages` and the three token lists.

        A whole file in the head is parsed; a cut one is judged by its streamed key structure.
        The registry streams it only when no adapter is sure from the head, and the chat
        adapter is fairly sure of a cut line that starts with `{"messages"`: such a head is
        streamed here, so a partial view of `messages` alone does not win.
        """
        if keys is not None:
            return 1.0 if _keys_match(keys) else 0.0
        start = head.lstrip()
        if not start.startswith(b"{"):
            return 0.0
        try:
            doc = json.loads(start)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            return 1.0 if all(isinstance(doc.get(k), list) for k in _LISTS) else 0.0
        seen = {m.group(1) for m in _HEAD_KEY.finditer(head)}
        if len(seen) == len(_LISTS) or start.startswith(_CHAT_STARTS):
            return _confirm(source, head)
        return 0.0

    def companion_of(self, source: SourceFile, all_uris: frozenset[str]) -> str | None:
        """A rewards file is read with the rollouts of its folder (and of its subfolders)."""
        if source.name not in REWARDS_FILES:
            return None
        folder = source.uri.rsplit("/", 1)[0] + "/"
        for uri in sorted(all_uris):
            inside = uri.startswith(folder) and uri.rsplit("/", 1)[-1] not in REWARDS_FILES
            if inside and uri.endswith((".json", ".json.gz", ".json.zst")):
                return uri
        return None

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """One trajectory per file; a file that does not parse or map is one BadRecord."""
        raw = stream.read()
        try:
            doc = loads(raw)
        except (UnicodeDecodeError, ValueError) as e:
            kept, size = bounded(raw)
            yield BadRecord(f"not a JSON document: {e}", None, 0, None, kept, size)
            return
        digest = hashlib.sha256(raw).hexdigest()
        yield to_parsed(
            lambda: _record(doc, source, digest), offset=0, raw=raw, finish=finish_model_fields
        )


def _confirm(source: SourceFile, head: bytes) -> float:
    """1.0 when the whole top-level object (streamed, bounded) has the four lists."""
    with source.open() as stream:
        stream.read(len(head))
        return 1.0 if _keys_match(scan_keys(head, stream)) else 0.0


def _token_list(
    doc: Mapping[str, Any], key: str, allowed: frozenset[int] | None = None
) -> list[int]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise ValueError(f"field {key!r}: expected a list of token ids")
    for i, v in enumerate(value):
        if type(v) is not int or v < 0 or (allowed is not None and v not in allowed):
            expected = "0 or 1" if allowed is not None else "a non-negative integer"
            raise ValueError(f"field {key!r}: item {i} is {v!r}, expected {expected}")
    return value


def _runs(ids: Sequence[int], mask: Sequence[int]) -> list[tuple[int, list[int]]]:
    """Maximal runs of equal mask: (mask, token ids)."""
    runs: list[tuple[int, list[int]]] = []
    for token, m in zip(ids, mask, strict=True):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(token)
        else:
            runs.append((m, [token]))
    return runs


def _blocks(messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, list[int]]]:
    """Maximal blocks of message indices: (1 for assistant messages, else 0, indices)."""
    blocks: list[tuple[int, list[int]]] = []
    for i, m in enumerate(messages):
        kind = 1 if m.get("role") == "assistant" else 0
        if blocks and blocks[-1][0] == kind:
            blocks[-1][1].append(i)
        else:
            blocks.append((kind, [i]))
    return blocks


def split_tokens(
    messages: list[dict[str, Any]], prompt: list[int], response: list[int], mask: list[int]
) -> str | None:
    """Put the token ids on the messages (see the module docstring); the reason when they do
    not line up with the messages (nothing is set then)."""
    runs = _runs([*prompt, *response], [0] * len(prompt) + mask)
    blocks = _blocks(messages)
    if [k for k, _ in runs] != [k for k, _ in blocks]:
        return (
            f"{len(runs)} mask runs do not line up with {len(blocks)} message blocks "
            "(assistant / other)"
        )
    if any(k == 1 and len(idx) > 1 for k, idx in blocks):
        return "consecutive assistant messages share one generated run"
    for (kind, tokens), (_, indices) in zip(runs, blocks, strict=True):
        target = messages[indices[-1]]
        target["token_ids"] = tokens
        if kind == 1:
            target["completion_tokens"] = len(tokens)
    return None


def rollout_tokens(
    trajectory: Mapping[str, Any],
) -> tuple[list[int], list[int], list[int]] | None:
    """(prompt_token_ids, response_token_ids, loss_mask) of an ingested Orchard rollout (a
    canonical trajectory dict), rebuilt from its messages; None when it holds no token ids."""
    info = (trajectory.get("attrs") or {}).get("orchard_rl") or {}
    whole = info.get("token_ids")
    if isinstance(whole, Mapping):
        return tuple(list(whole[k]) for k in TOKEN_KEYS)  # type: ignore[return-value]
    if "prompt_tokens" not in info:
        return None
    ids: list[int] = []
    mask: list[int] = []
    for m in trajectory["messages"]:
        if m.get("thread", "main") != "main" or not m.get("token_ids"):
            continue
        ids.extend(m["token_ids"])
        mask.extend([1 if m["role"] == "assistant" else 0] * len(m["token_ids"]))
    n = info["prompt_tokens"]
    return ids[:n], ids[n:], mask[n:]


def _read_rewards(path: str, fs: Any) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Key → {reward, resolved} of one rewards file, and the problem reading it if any."""
    try:
        info = fs.info(path)
        stamp = (info.get("size"), info.get("mtime"))
    except OSError:
        stamp = None
    cache_key = (path, stamp)
    if cache_key in _rewards_cache:
        return _rewards_cache[cache_key]
    out: dict[str, dict[str, Any]] = {}
    problem = None
    try:
        with fs.open(path, "rb") as f:
            text = f.read().decode("utf-8")
        if path.endswith(".jsonl"):
            for number, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    _reward_line(json.loads(line), number, out)
        else:
            doc = json.loads(text)
            if not isinstance(doc, dict):
                raise ValueError(f"expected an object of key → reward, got {type(doc).__name__}")
            for key, value in doc.items():
                out[str(key)] = _reward_entry(value, key)
    except (OSError, ValueError) as e:
        problem = f"rewards file {path} unreadable: {e}"
    if len(_rewards_cache) > 64:
        _rewards_cache.clear()
    _rewards_cache[cache_key] = (out, problem)
    return out, problem


def _reward_entry(value: Any, where: object) -> dict[str, Any]:
    if isinstance(value, Mapping):
        reward, resolved = as_number(value.get("reward")), as_bool(value.get("resolved"))
    else:
        reward, resolved = as_number(value), None
    if reward is None and resolved is None:
        raise ValueError(f"entry {where!r}: no numeric reward or resolved verdict")
    return {"reward": reward, "resolved": resolved}


def _reward_line(obj: Any, number: int, out: dict[str, dict[str, Any]]) -> None:
    if not isinstance(obj, Mapping):
        raise ValueError(f"line {number}: expected an object")
    key = first_str(obj.get(k) for k in _REWARD_ID_KEYS)
    if key is None:
        raise ValueError(f"line {number}: no {' / '.join(_REWARD_ID_KEYS)} naming the rollout")
    out[key.removesuffix(".json")] = _reward_entry(obj, f"line {number}")


def _sibling_rewards(source: SourceFile, rollout_id: str | None) -> tuple[dict[str, Any], str]:
    """(entry or {}, where it came from or why there is none) for one rollout file."""
    fs, path = fsspec.core.url_to_fs(source.uri, **(source.storage_options or {}))
    folder = posixpath.dirname(path)
    stem = source.name.removesuffix(".json")
    places = [
        (folder, [stem]),
        (posixpath.dirname(folder), [f"{posixpath.basename(folder)}/{stem}"]),
    ]
    for directory, file_keys in places:
        for name in REWARDS_FILES:
            candidate = posixpath.join(directory, name)
            if not fs.isfile(candidate):
                continue
            entries, problem = _read_rewards(candidate, fs)
            if problem is not None:
                return {}, problem
            keys = ([rollout_id] if rollout_id else []) + file_keys
            for key in keys:
                if key in entries:
                    return entries[key], name
            return {}, f"no entry for {' or '.join(map(repr, keys))} in {candidate}"
    return {}, f"no {' or '.join(REWARDS_FILES)} beside it or in its parent folder"


def _outcome(doc: Mapping[str, Any], source: SourceFile, rollout_id: str | None) -> dict[str, Any]:
    entry, where = _sibling_rewards(source, rollout_id)
    inline = {"reward": as_number(doc.get("reward")), "resolved": as_bool(doc.get("resolved"))}
    info: dict[str, Any] = {}
    if entry:
        chosen, origin = entry, where
        if inline["reward"] is not None and inline["reward"] != entry["reward"]:
            info["reward_inline"] = inline["reward"]  # the verifier's file wins; kept to audit
    elif inline["reward"] is not None or inline["resolved"] is not None:
        chosen, origin = inline, "rollout"
    else:
        info["reward_missing"] = where
        current_watch().notes.append(f"rollout without reward ({where}); stored without outcome")
        return {"orchard_info": info}
    reward, resolved = chosen["reward"], chosen["resolved"]
    if resolved is None and reward is not None:
        resolved = reward > 0
    return {
        "reward": reward,
        "resolved": resolved,
        "outcome_source": f"{FORMAT}:{origin}",
        "orchard_info": info,
    }


def _record(doc: Any, source: SourceFile, digest: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise TypeError(f"expected a rollout object, got {type(doc).__name__}")
    if not isinstance(doc.get("messages"), list) or not doc["messages"]:
        raise ValueError("field 'messages': expected a non-empty list of chat messages")
    prompt = _token_list(doc, "prompt_token_ids")
    response = _token_list(doc, "response_token_ids")
    mask = _token_list(doc, "loss_mask", frozenset({0, 1}))
    if len(mask) != len(response):
        raise ValueError(
            f"field 'loss_mask': {len(mask)} values for {len(response)} response tokens"
        )
    metadata: dict[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), dict) else {}
    messages = [chat_message(m) for m in doc["messages"]]
    name_tool_results(messages)
    tokenizer = first_str([doc.get("tokenizer"), metadata.get("tokenizer")])
    info: dict[str, Any] = {"prompt_tokens": len(prompt)}
    unsplit = split_tokens(messages, prompt, response, mask)
    if unsplit is not None:
        info = {"token_split": unsplit, "token_ids": {k: doc[k] for k in TOKEN_KEYS}}
        current_watch().notes.append(f"token ids kept whole in attrs.orchard_rl ({unsplit})")
    elif tokenizer:
        for m in messages:
            if "token_ids" in m:
                m["tokenizer"] = tokenizer
    task_id = first_str([doc.get("instance_id"), doc.get("task_id"), metadata.get("instance_id")])
    rollout_id = first_str([doc.get("rollout_id"), doc.get("id"), metadata.get("rollout_id")])
    outcome = _outcome(doc, source, rollout_id)
    info.update(outcome.pop("orchard_info"))
    exit_status = doc.get("exit_status")
    exit_text = exit_status if isinstance(exit_status, str) else None
    other = {k: v for k, v in doc.items() if k not in _MAPPED}
    attrs = {**other, "metadata": metadata or None, "rollout_id": rollout_id, "orchard_rl": info}
    # The rollout's own ids are its identity; without them, its bytes (never the path).
    ident = [task_id, rollout_id] if rollout_id else [digest]
    return drop_none(
        {
            "trajectory_id": stable_id(FORMAT, *ident),
            "task_id": task_id,
            "group_id": first_str([doc.get("group_id")]),
            "policy_model": first_str([doc.get("model"), metadata.get("model")]),
            "stage": "rl",
            "status": exit_status_to_status(exit_text),
            "exit_reason": exit_text,
            "final_output": doc.get("model_patch")
            if isinstance(doc.get("model_patch"), str)
            else None,
            **outcome,
            "attrs": drop_none(attrs),
            "messages": messages,
        }
    )
