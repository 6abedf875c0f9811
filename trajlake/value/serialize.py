"""Value-model inputs: a trajectory in any shape → one `Conversation` → one text in a token budget.

Layouts (methods.md §8.2): the whole trajectory in a judge layout, issue + final output, the prefix
up to a turn; Orchard's compact form, the tail, the patch alone, and a listwise group of patches.
Pure Python: counting with a real tokenizer is injected, never imported.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from trajlake.value._compact import CompactCaps, compact_assistant, patch_group

# The compact form's parts that callers use are re-exported (explicitly, `as`) with this API.
from trajlake.value._compact import PatchGroup as PatchGroup
from trajlake.value._compact import compact_observation as compact_observation
from trajlake.value._compact import exit_status as exit_status
from trajlake.value._compact import observation_type as observation_type

# Normalisation lives in `_conversation`; re-exported (explicitly, `as`) as part of this API.
from trajlake.value._conversation import ChatMessage as ChatMessage
from trajlake.value._conversation import Conversation as Conversation
from trajlake.value._conversation import as_conversation as as_conversation
from trajlake.value._conversation import n_turns as n_turns

SerializerKind = Literal["whole", "final", "prefix", "compact", "tail", "patch"]
TokenCounter = Callable[[str], int]
KINDS: tuple[str, ...] = get_args(SerializerKind)

INSTRUCTION = (
    "Below is an issue and the log of an agent's attempt to resolve it. "
    "Judge whether the attempt resolved the issue."
)
SYSTEM_HEADER = "=== SYSTEM PROMPT ==="
ISSUE_HEADER = "=== ISSUE ==="
LOG_HEADER = "=== INTERACTION LOG ==="
END_HEADER = "=== END INTERACTION ==="
FINAL_HEADER = "=== FINAL OUTPUT ==="
LAST_MESSAGE_HEADER = "=== LAST ASSISTANT MESSAGE ==="
EXIT_HEADER = "=== EXIT STATUS ==="
_LABELS: dict[str, str] = {"system": "SYSTEM:", "user": "USER:", "tool": "OBSERVATION:"}
_TRIES = 6


def approx_token_count(text: str) -> int:
    """The default token counter: ``ceil(len(text) / 4)``, about right for English and code.

    It is additive up to rounding (the count of a join never exceeds the sum of the parts' counts),
    so budgets computed from pieces hold for the whole text.
    """
    return (len(text) + 3) // 4


def tokenizer_counter(tokenizer: Any) -> TokenCounter:
    """An exact counter from a Hugging Face tokenizer (special tokens not counted).

    Fast tokenizers are called through their Rust backend (the Python `__call__` costs more than
    the encoding for short pieces), and short pieces are cached: the system prompt and issue
    repeat across every candidate and prefix of a task.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)

    def exact(text: str) -> int:
        if backend is not None:
            return len(backend.encode(text, add_special_tokens=False).ids)
        return len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    cached = functools.lru_cache(maxsize=16384)(exact)

    def count(text: str) -> int:
        # Long texts (big observations) are rarely repeated and would pin memory in the cache.
        return cached(text) if len(text) <= 4096 else exact(text)

    return count


# ---------------------------------------------------------------- rendering


@dataclass(frozen=True)
class _Piece:
    text: str
    tokens: int


class _Ctx:
    """Counts each piece once; fixed strings (headers) are counted once per call."""

    def __init__(self, count: TokenCounter, observation_max_tokens: int) -> None:
        self.count = count
        self.observation_max_tokens = observation_max_tokens
        self._fixed: dict[str, _Piece] = {}
        self.sep = count("\n")

    def piece(self, text: str) -> _Piece:
        return _Piece(text, self.count(text))

    def fixed(self, text: str) -> _Piece:
        if text not in self._fixed:
            self._fixed[text] = self.piece(text)
        return self._fixed[text]

    def join(self, pieces: Sequence[_Piece]) -> _Piece:
        """Joined with newlines; the count is the sum of the parts' (checked later)."""
        tokens = sum(p.tokens for p in pieces) + self.sep * max(len(pieces) - 1, 0)
        return _Piece("\n".join(p.text for p in pieces), tokens)

    def truncate(self, piece: _Piece, limit: int, keep: Literal["head", "middle"]) -> _Piece:
        """Cut to at most `limit` tokens, keeping the head (and tail), with a marker."""
        if piece.tokens <= limit:
            return piece
        text, fraction = piece.text, max(limit, 0) / piece.tokens
        for _ in range(_TRIES):
            # Cut by characters in proportion, then measure: token density is uneven.
            chars = int(len(text) * fraction)
            omitted = max(1, round(piece.tokens * (1 - chars / len(text))))
            marker = f"[... {omitted} tokens omitted ...]"
            if keep == "head":
                out = f"{text[:chars]}\n{marker}"
            else:
                head, tail = (chars + 1) // 2, chars // 2
                out = f"{text[:head]}\n{marker}\n{text[len(text) - tail :]}"
            cut = self.piece(out)
            if cut.tokens <= limit:
                return cut
            fraction *= 0.9 * limit / cut.tokens
        marker_piece = self.piece(f"[... {piece.tokens} tokens omitted ...]")
        return marker_piece if marker_piece.tokens <= limit else _Piece("", 0)


def _call_text(name: str, arguments: str) -> str:
    try:
        params = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        params = None
    if not isinstance(params, dict):
        return f"<function={name}>\n{arguments}\n</function>"
    lines = [f"<function={name}>"]
    for key, value in params.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines.append(f"<parameter={key}>{shown}</parameter>")
    lines.append("</function>")
    return "\n".join(lines)


def _render(ctx: _Ctx, message: ChatMessage) -> list[_Piece]:
    if message.role != "assistant":
        body = ctx.truncate(ctx.piece(message.content), ctx.observation_max_tokens, "middle")
        return [ctx.fixed(_LABELS[message.role]), body]
    lines = [message.content] if message.content else []
    lines += [_call_text(name, arguments) for name, arguments in message.tool_calls]
    return [ctx.fixed("ASSISTANT:"), ctx.piece("\n".join(lines))]


@dataclass(frozen=True)
class _Parts:
    """A conversation rendered and counted once, ready to assemble under any budget."""

    system: _Piece | None
    issue: _Piece
    blocks: tuple[_Piece, ...]
    """One per turn; turn 0's block starts with messages between the task and the first turn."""
    final: _Piece | None
    last_message: _Piece | None


Renderer = Callable[[_Ctx, ChatMessage], list[_Piece]]


def _compact_renderer(caps: CompactCaps) -> Renderer:
    """Orchard's compact turns: capped reasoning and calls, observations cut by type."""

    def render(ctx: _Ctx, message: ChatMessage) -> list[_Piece]:
        if message.role != "assistant":
            body = compact_observation(message.content, caps.observation)
            return [ctx.fixed(_LABELS[message.role]), ctx.piece(body)]
        return [ctx.fixed("ASSISTANT:"), ctx.piece(compact_assistant(message, caps, _call_text))]

    return render


def _parts(ctx: _Ctx, conv: Conversation, render: Renderer = _render) -> _Parts:
    system: list[str] = []
    extras: list[_Piece] = []
    turns: list[list[_Piece]] = []
    task_pending, last = True, None
    for m in conv.messages:
        if m.role == "assistant":
            rendered = render(ctx, m)
            turns.append(extras + rendered if not turns else rendered)
            last = rendered[1]
        elif turns:
            turns[-1] += render(ctx, m)
        elif m.role == "system":
            system.append(m.content)
        elif task_pending and m.role == "user" and m.content.strip() == conv.task.strip():
            task_pending = False  # shown as the issue
        else:
            extras += render(ctx, m)
    blocks = [ctx.join(t) for t in turns] or ([ctx.join(extras)] if extras else [])
    return _Parts(
        system=ctx.piece("\n\n".join(system)) if system else None,
        issue=ctx.piece(conv.task),
        blocks=tuple(blocks),
        final=ctx.piece(conv.final_output) if conv.final_output is not None else None,
        last_message=last,
    )


# ---------------------------------------------------------------- budgeting


def _log_pieces(
    ctx: _Ctx,
    system: _Piece | None,
    issue: _Piece,
    blocks: Sequence[_Piece],
    dropped: int,
    final: _Piece | None,
    status: _Piece | None = None,
) -> list[_Piece]:
    out = [ctx.fixed(INSTRUCTION)]
    if system is not None:
        out += [ctx.fixed(SYSTEM_HEADER), system]
    out += [ctx.fixed(ISSUE_HEADER), issue, ctx.fixed(LOG_HEADER)]
    if dropped:
        out.append(ctx.piece(f"[... {dropped} earlier turns omitted ...]"))
    out += [*blocks, ctx.fixed(END_HEADER)]
    if final is not None:
        out += [ctx.fixed(FINAL_HEADER), final]
    if status is not None:
        out += [ctx.fixed(EXIT_HEADER), status]
    return out


def _newest(ctx: _Ctx, blocks: Sequence[_Piece], budget: int) -> list[_Piece]:
    """The newest blocks, whole, that fit in `budget`; else the newest one cut to fit."""
    kept: list[_Piece] = []
    for block in reversed(blocks):
        if block.tokens + ctx.sep > budget:
            break
        kept.insert(0, block)
        budget -= block.tokens + ctx.sep
    if not kept and blocks and budget > ctx.sep:
        kept = [ctx.truncate(blocks[-1], budget - ctx.sep, "middle")]
    return kept


def _fit(ctx: _Ctx, full: _Piece, attempt: Callable[[int], str], max_tokens: int) -> str:
    """`full` when it fits, else `attempt(budget)`, re-run with a smaller budget on overshoot.

    Piece counts of a tokenizer need not add up exactly over joins, so the text is measured.
    """
    if full.tokens <= max_tokens and ctx.count(full.text) <= max_tokens:
        return full.text
    budget = max_tokens
    for _ in range(_TRIES):
        text = attempt(budget)
        excess = ctx.count(text) - max_tokens
        if excess <= 0:
            return text
        budget -= excess
    return _hard_cut(ctx, text, max_tokens)


def _fit_log(
    ctx: _Ctx,
    parts: _Parts,
    blocks: Sequence[_Piece],
    final: _Piece | None,
    max_tokens: int,
    status: _Piece | None = None,
) -> str:
    def attempt(budget: int) -> str:
        system = ctx.truncate(parts.system, max_tokens // 8, "middle") if parts.system else None
        issue = ctx.truncate(parts.issue, max_tokens // 4, "head")
        output = ctx.truncate(final, max_tokens // 4, "middle") if final is not None else None
        # Sized with the widest marker, so the real one (fewer turns dropped) fits too.
        frame = ctx.join(_log_pieces(ctx, system, issue, [], len(blocks), output, status))
        kept = _newest(ctx, blocks, budget - frame.tokens)
        pieces = _log_pieces(ctx, system, issue, kept, len(blocks) - len(kept), output, status)
        return ctx.join(pieces).text

    full = ctx.join(_log_pieces(ctx, parts.system, parts.issue, blocks, 0, final, status))
    return _fit(ctx, full, attempt, max_tokens)


def _fit_final(ctx: _Ctx, parts: _Parts, max_tokens: int) -> str:
    if parts.final is not None:
        header, body = ctx.fixed(FINAL_HEADER), parts.final
    elif parts.last_message is not None:
        header, body = ctx.fixed(LAST_MESSAGE_HEADER), parts.last_message
    else:
        header, body = ctx.fixed(FINAL_HEADER), ctx.fixed("(none)")
    head = [ctx.fixed(INSTRUCTION), ctx.fixed(ISSUE_HEADER)]

    def attempt(budget: int) -> str:
        frame = [*head, ctx.truncate(parts.issue, max_tokens // 4, "head"), header]
        cut = ctx.truncate(body, budget - ctx.join(frame).tokens - ctx.sep, "middle")
        return ctx.join([*frame, cut]).text

    return _fit(ctx, ctx.join([*head, parts.issue, header, body]), attempt, max_tokens)


def _fit_patch(ctx: _Ctx, parts: _Parts, status: _Piece, max_tokens: int) -> str:
    """Issue head, the final patch (``(none)`` without one, never the last message), exit status."""
    body = parts.final if parts.final is not None else ctx.fixed("(none)")
    head = [ctx.fixed(INSTRUCTION), ctx.fixed(ISSUE_HEADER)]
    tail = [ctx.fixed(EXIT_HEADER), status]

    def attempt(budget: int) -> str:
        frame = [*head, ctx.truncate(parts.issue, max_tokens // 4, "head"), ctx.fixed(FINAL_HEADER)]
        room = budget - ctx.join([*frame, *tail]).tokens - ctx.sep
        return ctx.join([*frame, ctx.truncate(body, room, "middle"), *tail]).text

    full = ctx.join([*head, parts.issue, ctx.fixed(FINAL_HEADER), body, *tail])
    return _fit(ctx, full, attempt, max_tokens)


def _hard_cut(ctx: _Ctx, text: str, max_tokens: int) -> str:
    """Last resort for budgets too small for the layout itself: the longest fitting head."""
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if ctx.count(text[:mid]) <= max_tokens:
            low = mid
        else:
            high = mid - 1
    return text[:low]


# ---------------------------------------------------------------- public API


def _check_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def _check_kind(kind: Any) -> SerializerKind:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")
    return cast(SerializerKind, kind)


def _text_of(
    ctx: _Ctx, parts: _Parts, kind: SerializerKind, turn: int | None, max_tokens: int
) -> str:
    if kind == "final":
        return _fit_final(ctx, parts, max_tokens)
    if kind == "whole":
        return _fit_log(ctx, parts, parts.blocks, parts.final, max_tokens)
    return _fit_log(ctx, parts, parts.blocks[: cast(int, turn) + 1], None, max_tokens)


def _status_text(
    conversation: Conversation, kind: SerializerKind, max_tokens: int, ctx: _Ctx, caps: CompactCaps
) -> str:
    """The kinds that end in an exit status: compact, tail, patch (no system prompt in any)."""
    status = ctx.piece(exit_status(conversation))
    render = _compact_renderer(caps) if kind == "compact" else _render
    parts = dataclasses.replace(_parts(ctx, conversation, render), system=None)
    if kind == "patch":
        return _fit_patch(ctx, parts, status, max_tokens)
    return _fit_log(ctx, parts, parts.blocks, parts.final, max_tokens, status)


def serialize(
    conv: Conversation | Any,
    kind: SerializerKind,
    *,
    turn: int | None = None,
    max_tokens: int = 4096,
    observation_max_tokens: int = 512,
    count_tokens: TokenCounter | None = None,
    reasoning_max_chars: int = 600,
    command_max_chars: int = 400,
    observation_max_chars: int = 1200,
) -> str:
    """Render a conversation as one value-model input text within a token budget.

    Layouts: ``"whole"`` is a judge prompt: instruction, the agent's system prompt, ``=== ISSUE
    ===``, ``=== INTERACTION LOG ===`` (assistant text, tool calls as
    ``<function=name><parameter=p>v</parameter></function>``, ``OBSERVATION:`` blocks), ``===
    END INTERACTION ===`` and, when known, ``=== FINAL OUTPUT ===``. ``"prefix"`` is the same up
    to turn `turn` (its observations included) without the final output. ``"final"`` is the
    issue and the final output (the last assistant message when there is none).

    Three kinds end in ``=== EXIT STATUS ===`` (`exit_status`: submitted / limits / error / no
    submission) and leave out the system prompt: ``"compact"`` is the whole layout in Orchard's
    compact form (reasoning cut to `reasoning_max_chars`, each call to `command_max_chars`,
    each observation to `observation_max_chars` by type: see `compact_observation`);
    ``"tail"`` is the whole layout's newest turns; ``"patch"`` is the issue and the final
    output only (``(none)`` without one).

    Every observation of the other kinds is cut in the middle to `observation_max_tokens`. When
    the text would exceed `max_tokens`, the issue keeps its head (at most 1/4 of the budget), the
    system prompt at most 1/8, the final output at most 1/4 (cut in the middle), and the log
    keeps its newest turns whole, the oldest dropped first behind an ``[... N earlier turns
    omitted ...]`` marker.

    Args:
        conv: A `Conversation` or anything `as_conversation` accepts.
        kind: One of `KINDS`.
        turn: The last turn of a prefix (0-based); only for ``"prefix"``.
        max_tokens: Token budget of the whole text.
        observation_max_tokens: Token budget of each observation (and other non-assistant
            message); not for ``"compact"``, which caps observations in characters.
        count_tokens: Token counter; default `approx_token_count`. Each piece is counted once,
            and the assembled text (about `max_tokens` long) once more to guarantee the budget.
        reasoning_max_chars: ``"compact"``: characters of each turn's reasoning.
        command_max_chars: ``"compact"``: characters of each tool call.
        observation_max_chars: ``"compact"``: characters of each observation.

    Returns:
        The text; ``count_tokens(text) <= max_tokens``. The same input gives the same text.

    Raises:
        ValueError: Unknown kind, `turn` missing/out of range for a prefix or given otherwise, or
            non-positive budgets.
        TypeError: `conv` has no supported shape, or a budget is not an int.
    """
    conversation = as_conversation(conv)
    kind = _check_kind(kind)
    _check_int("max_tokens", max_tokens)
    ctx = _Ctx(
        count_tokens or approx_token_count,
        _check_int("observation_max_tokens", observation_max_tokens),
    )
    caps = _caps(reasoning_max_chars, command_max_chars, observation_max_chars)
    if kind == "prefix":
        turns = n_turns(conversation)
        if isinstance(turn, bool) or not isinstance(turn, int) or not 0 <= turn < turns:
            raise ValueError(f"kind='prefix' needs a turn in 0..{turns - 1}, got {turn!r}")
    elif turn is not None:
        raise ValueError(f"turn is only for kind='prefix', not {kind!r}")
    if kind in _STATUS_KINDS:
        return _status_text(conversation, kind, max_tokens, ctx, caps)
    return _text_of(ctx, _parts(ctx, conversation), kind, turn, max_tokens)


_STATUS_KINDS = frozenset({"compact", "tail", "patch"})
_CAP_KEYS = ("reasoning_max_chars", "command_max_chars", "observation_max_chars")


def _caps(reasoning: Any, command: Any, observation: Any) -> CompactCaps:
    return CompactCaps(
        reasoning=_check_int("reasoning_max_chars", reasoning),
        command=_check_int("command_max_chars", command),
        observation=_check_int("observation_max_chars", observation),
    )


def serialize_group(candidates: Sequence[Any], tokenizer: Any, budget: int) -> PatchGroup:
    """One task's candidates as one listwise text: each patch under a numbered header.

    Args:
        candidates: Trajectories of one task, in any shape `as_conversation` accepts.
        tokenizer: A Hugging Face tokenizer counting the budget exactly, or None for
            `approx_token_count`.
        budget: Token budget of the whole text, split evenly between the patches.

    Returns:
        The text and the character spans of each candidate's header and patch.

    Raises:
        ValueError: No candidates, candidates of different tasks, or a budget too small for
            the headers.
    """
    convs = [as_conversation(c) for c in candidates]
    if not convs:
        raise ValueError("serialize_group needs at least one candidate")
    task_ids = {c.task_id for c in convs if c.task_id is not None}
    if len(task_ids) > 1:
        raise ValueError(f"candidates of one task expected, got tasks {sorted(task_ids)}")
    count = tokenizer_counter(tokenizer) if tokenizer is not None else approx_token_count
    return patch_group(convs, count, _check_int("budget", budget))


@dataclass(frozen=True)
class Serializer:
    """A serializer configuration, saved with a model so that inputs are rendered the same way.

    Attributes:
        kind: One of `KINDS` (see `serialize`).
        max_tokens: Token budget of one text.
        observation_max_tokens: Token budget of each observation.
        count_tokens: Token counter (default `approx_token_count`); not saved by `to_dict`, set
            it again with `with_tokenizer` after loading.
        reasoning_max_chars: ``"compact"``: characters of each turn's reasoning.
        command_max_chars: ``"compact"``: characters of each tool call.
        observation_max_chars: ``"compact"``: characters of each observation.
    """

    kind: SerializerKind
    max_tokens: int = 4096
    observation_max_tokens: int = 512
    count_tokens: TokenCounter | None = field(default=None, compare=False, repr=False)
    reasoning_max_chars: int = 600
    command_max_chars: int = 400
    observation_max_chars: int = 1200

    def __post_init__(self) -> None:
        _check_kind(self.kind)
        _check_int("max_tokens", self.max_tokens)
        _check_int("observation_max_tokens", self.observation_max_tokens)
        _caps(self.reasoning_max_chars, self.command_max_chars, self.observation_max_chars)

    def with_tokenizer(self, tokenizer: Any) -> Serializer:
        """A copy counting tokens exactly with a Hugging Face tokenizer."""
        return dataclasses.replace(self, count_tokens=tokenizer_counter(tokenizer))

    def text(self, obj: Any, turn: int | None = None) -> str:
        """The text of one trajectory (`turn` only for ``kind="prefix"``)."""
        return serialize(
            obj,
            self.kind,
            turn=turn,
            max_tokens=self.max_tokens,
            observation_max_tokens=self.observation_max_tokens,
            count_tokens=self.count_tokens,
            reasoning_max_chars=self.reasoning_max_chars,
            command_max_chars=self.command_max_chars,
            observation_max_chars=self.observation_max_chars,
        )

    def texts(self, objs: Iterable[Any]) -> list[str]:
        """The texts of many trajectories, in order (not for ``"prefix"``: see `prefix_texts`)."""
        if self.kind == "prefix":
            raise ValueError("kind='prefix' needs a turn per text; use prefix_texts")
        return [self.text(obj) for obj in objs]

    def prefix_texts(self, obj: Any) -> list[str]:
        """The prefix text up to each turn t = 0..n_turns-1, rendering and counting pieces once."""
        ctx = _Ctx(self.count_tokens or approx_token_count, self.observation_max_tokens)
        conversation = as_conversation(obj)
        parts = _parts(ctx, conversation)
        return [
            _text_of(ctx, parts, "prefix", t, self.max_tokens) for t in range(n_turns(conversation))
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready settings (the counter is not included; the character caps only for
        ``"compact"``, the one kind that reads them, so older saved settings stay as they were)."""
        settings: dict[str, Any] = {
            "kind": self.kind,
            "max_tokens": self.max_tokens,
            "observation_max_tokens": self.observation_max_tokens,
        }
        if self.kind == "compact":
            settings.update({key: getattr(self, key) for key in _CAP_KEYS})
        return settings

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Serializer:
        """The serializer `to_dict` described.

        Raises:
            ValueError: Unknown keys, a missing kind or invalid values.
            TypeError: `data` is not a mapping or a value has the wrong type.
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"expected a dict, got {type(data).__name__}")
        known = {"kind", "max_tokens", "observation_max_tokens", *_CAP_KEYS}
        if set(data) - known or "kind" not in data:
            raise ValueError(
                f"expected keys kind, max_tokens, observation_max_tokens and (compact) "
                f"{', '.join(_CAP_KEYS)}; got {sorted(data)}"
            )
        return cls(**dict(data))
