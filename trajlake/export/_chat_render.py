"""Render a chat conversation with a tokenizer's chat template into `(input_ids, loss_weight)`.

`render_conversation` is the whole SFT-masking contract, and needs no `{% generation %}` markers.

Which tokens belong to an assistant message: everything the template emits for it after the
generation prompt (the role header, e.g. `<|im_start|>assistant\\n`, is *not* the assistant's) up
to and including its end-of-turn marker (`<|im_end|>`, `<|eot_id|>`); whitespace the template emits
after that marker (the `\\n` after `<|im_end|>`) is not. That covers the content, any reasoning
block and the tool calls as the template renders them. In characters, for assistant message i::

    start = len(render(messages[:i], add_generation_prompt=True))
    end   = len(render(messages[:i + 1]).rstrip())

which is the *reference* definition (incremental prefix rendering). A token is the assistant's when
its character range overlaps [start, end). The fast path finds the same spans from a single render
(see `fast_spans`) and falls back to the reference wherever it cannot verify itself.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from trajlake.errors import ChatTemplateError

logger = logging.getLogger(__name__)


# Private-use code points: no tokenizer vocabulary or real conversation should contain them.
_OPEN = "\ue000"
_CLOSE = "\ue001"
_PROBE_USER = "Hello there."
_PROBE_ASSISTANT = "General Kenobi."

Span = tuple[int, int]


def render_text(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    *,
    add_generation_prompt: bool = False,
) -> str:
    """The template's text for `messages` (tools passed through only when there are some)."""
    try:
        text = tokenizer.apply_chat_template(
            list(messages),
            tools=list(tools) if tools else None,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )
    except Exception as e:  # jinja errors, template `raise_exception`, missing template
        raise ChatTemplateError(f"the chat template failed to render this conversation: {e}") from e
    if not isinstance(text, str):
        raise ChatTemplateError(f"apply_chat_template returned {type(text).__name__}, not a string")
    return text


def reference_spans(
    tokenizer: Any, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
) -> tuple[str, list[Span | None]]:
    """Assistant character spans by incremental prefix rendering: slow, but the definition."""
    full = render_text(tokenizer, messages, tools)
    spans: list[Span | None] = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            spans.append(None)
            continue
        before = (
            render_text(tokenizer, messages[:i], tools, add_generation_prompt=True) if i else ""
        )
        upto = render_text(tokenizer, messages[: i + 1], tools)
        if not upto.startswith(before) or not full.startswith(upto):
            raise ChatTemplateError(
                f"the chat template is not prefix-stable at message {i}: rendering the first "
                f"{i} messages (with the generation prompt) is not a prefix of rendering one "
                "more, so the assistant's tokens cannot be located; use a template that renders "
                "history unchanged"
            )
        spans.append((len(before), len(upto.rstrip())))
    return full, spans


class _TemplateShape:
    """What a template wraps an assistant turn in, learned once from a probe conversation."""

    def __init__(self, header: str, end: str) -> None:
        self.header = header  # the generation prompt, e.g. "<|im_start|>assistant\n"
        self.end = end  # the end-of-turn marker, e.g. "<|im_end|>"


_SHAPES: dict[tuple[int, str], _TemplateShape | None] = {}


def _template_shape(tokenizer: Any) -> _TemplateShape | None:
    key = (id(tokenizer), str(getattr(tokenizer, "chat_template", "")))
    if key not in _SHAPES:
        _SHAPES[key] = _probe_shape(tokenizer)
    return _SHAPES[key]


def _probe_shape(tokenizer: Any) -> _TemplateShape | None:
    user = [{"role": "user", "content": _PROBE_USER}]
    try:
        bare = render_text(tokenizer, user, None)
        prompt = render_text(tokenizer, user, None, add_generation_prompt=True)
        full = render_text(
            tokenizer, [*user, {"role": "assistant", "content": _PROBE_ASSISTANT}], None
        )
    except ChatTemplateError:
        return None
    header = prompt[len(bare) :]
    tail = full[len(prompt) :].rstrip()
    if not (
        prompt.startswith(bare)
        and full.startswith(prompt)
        and header
        and tail.startswith(_PROBE_ASSISTANT)
    ):
        return None
    end = tail[len(_PROBE_ASSISTANT) :]
    if not end or full.count(header) != 1:
        return None
    return _TemplateShape(header, end)


def _all_text(message: dict[str, Any]) -> str:
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call)
        parts.append(str(fn.get("name", "")))
        parts.append(str(fn.get("arguments", "")))
    return "\n".join(parts)


def fast_spans(
    tokenizer: Any, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
) -> tuple[str, list[Span | None]] | None:
    """Assistant character spans from a sentinel render and a plain render (None: unverifiable).

    Assistant contents are wrapped in private-use sentinels; the k-th assistant turn starts right
    after the k-th occurrence of the generation-prompt header and ends with the first end-of-turn
    marker after its (sentinel-marked) content. Verified: sentinels balanced and in the right
    turns, the header occurring exactly once per assistant turn, no marker or sentinel inside the
    data, and the cleaned text equal to the plain render.
    """
    shape = _template_shape(tokenizer)
    if shape is None:
        return None
    for m in messages:
        text = _all_text(m)
        if _OPEN in text or _CLOSE in text or shape.header in text or shape.end in text:
            return None
    wrapped: list[dict[str, Any]] = []
    marked: list[bool] = []
    for m in messages:
        content = m.get("content")
        mark = m.get("role") == "assistant" and isinstance(content, str) and content != ""
        wrapped.append({**m, "content": f"{_OPEN}{content}{_CLOSE}"} if mark else m)
        marked.append(mark)
    plain = render_text(tokenizer, messages, tools)
    try:
        marked_text = render_text(tokenizer, wrapped, tools)
    except ChatTemplateError:
        return None
    clean = marked_text.replace(_OPEN, "").replace(_CLOSE, "")
    if clean != plain:
        return None
    # positions in the marked text of header ends, and sentinel pairs, mapped to clean offsets
    assistants = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if plain.count(shape.header) != len(assistants):
        return None
    spans: list[Span | None] = [None] * len(messages)
    pos = 0  # cursor in the marked text
    removed = 0  # sentinels seen before `pos`
    for i in assistants:
        h = marked_text.find(shape.header, pos)
        if h < 0:
            return None
        removed += marked_text.count(_OPEN, pos, h) + marked_text.count(_CLOSE, pos, h)
        start_marked = h + len(shape.header)
        start = start_marked - removed
        cursor = start_marked
        if marked[i]:
            o = marked_text.find(_OPEN, cursor)
            c = marked_text.find(_CLOSE, o + 1)
            nxt = marked_text.find(shape.header, start_marked)
            if (
                o < 0
                or c < 0
                or (0 <= nxt < c)
                or marked_text.count(_OPEN, cursor, o)
                or marked_text.count(_CLOSE, cursor, o)
            ):
                return None
            removed += 2
            cursor = c + 1
        e = marked_text.find(shape.end, cursor)
        nxt = marked_text.find(shape.header, cursor)
        if (
            e < 0
            or (0 <= nxt < e)
            or _OPEN in marked_text[cursor:e]
            or _CLOSE in marked_text[cursor:e]
        ):
            return None
        spans[i] = (start, e + len(shape.end) - removed)
        pos = e + len(shape.end)
    if _OPEN in marked_text[pos:] or _CLOSE in marked_text[pos:]:
        return None
    return plain, spans


def tokens_from_spans(
    offsets: Sequence[tuple[int, int]],
    spans: Sequence[Span | None],
    weights: Sequence[float | None],
) -> list[float]:
    """Per-token weights: a token takes the weight of the assistant span its characters overlap."""
    loss = [0.0] * len(offsets)
    ranges = [(s, w) for s, w in zip(spans, weights, strict=True) if s is not None]
    t = 0
    for (start, end), weight in ranges:
        w = float(weight or 0.0)
        while t < len(offsets) and offsets[t][1] <= start:
            t += 1
        while t < len(offsets) and offsets[t][0] < end:
            loss[t] = w
            t += 1
    return loss


def encode_with_offsets(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids and character offsets of `text`, special tokens as the template wrote them."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]


def assistant_spans(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None = None,
    *,
    method: str = "auto",
) -> tuple[str, list[Span | None], str]:
    """The rendered text, each message's assistant span (None for others) and the method used."""
    if method not in ("auto", "fast", "reference"):
        raise ValueError(f"method must be 'auto', 'fast' or 'reference', got {method!r}")
    if method != "reference":
        found = fast_spans(tokenizer, messages, tools)
        if found is not None:
            return found[0], found[1], "fast"
        if method == "fast":
            raise ChatTemplateError(
                "the fast path could not verify its spans for this conversation"
            )
        logger.debug("fast assistant-span path unverifiable; using incremental prefix rendering")
    text, spans = reference_spans(tokenizer, messages, tools)
    return text, spans, "reference"


def render_conversation(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    weights: Sequence[float | None],
    tools: Sequence[dict[str, Any]] | None = None,
    *,
    method: str = "auto",
) -> tuple[list[int], list[float]]:
    """Token ids and per-token loss weights for one conversation.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template (no `{% generation %}` needed).
        messages: OpenAI chat dicts (system/user/assistant with optional `tool_calls`/tool).
        weights: one per message: the assistant message's loss weight (0.0: not trained), None for
            other roles.
        tools: JSON-schema tool definitions passed to the template.
        method: "auto" (fast path, verified, else reference), "fast" (raise if unverifiable) or
            "reference" (incremental prefix rendering).

    Returns:
        `(input_ids, loss_weight)`: the weight of the assistant message a token belongs to,
        else 0.0.
    """
    if len(weights) != len(messages):
        raise ValueError(f"{len(weights)} weights for {len(messages)} messages")
    text, spans, _ = assistant_spans(tokenizer, messages, tools, method=method)
    ids, offsets = encode_with_offsets(tokenizer, text)
    return ids, tokens_from_spans(offsets, spans, weights)
