"""Orchard's compact trajectory form: what of each turn predicts success, by character caps.

Observations are typed with small line heuristics (test results, tracebacks, listings) and each
type keeps its informative lines; the exit status is read from the conversation itself. Pure
string work: token budgets are applied by `trajlake.value.serialize`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from trajlake.value._conversation import ChatMessage, Conversation

ObservationType = Literal["test", "traceback", "listing", "text"]
ExitStatus = Literal["submitted", "limits", "error", "no submission"]

# pytest's "===== 3 failed, 10 passed in 0.12s =====", unittest's "Ran 4 tests" / "FAILED
# (failures=1)" / "OK", and per-test outcome lines ("FAILED tests/x.py::t - ...", "ERROR ...").
_TEST_SUMMARY = re.compile(
    r"\b\d+ (passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b"
    r"|^Ran \d+ tests? in "
    r"|^(FAILED|OK)\b( \(.*\))?\s*$"
    r"|^=+ .*(passed|failed|error|no tests ran).* =+$"
)
_TEST_OUTCOME = re.compile(r"^(FAILED|ERROR|PASSED|XFAIL|XPASS)\b|::\S+ (PASSED|FAILED|ERROR)\b")
_TEST_FAILURE = re.compile(r"^(FAILED|ERROR)\b|::\S+ (FAILED|ERROR)\b")
_TRACEBACK_START = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')
# The exception line ending a traceback: a dotted name ending in Error/Exception/... then ":".
_ERROR_LINE = re.compile(
    r"^\s*([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning|Failure)|AssertionError)\b:?"
)
# A listing: ls -l rows, paths (find), path:line: matches (grep -n) or numbered lines (cat -n,
# SWE-agent's viewer); counted over non-empty lines.
_LISTING_LINE = re.compile(
    r"^([d\-l][rwx\-]{9}[.+@]?\s"  # ls -l
    r"|\s*\d+[:\t]"  # cat -n / viewer line numbers
    r"|[\w./\-]+:\d+:"  # grep -n
    r"|\.?/?[\w.\-]+(/[\w.\-]+)+/?\s*$"  # find / paths
    r"|total \d+\s*$)"
)
_LIMITS = re.compile(
    r"exit_cost|exit_context|exit_total_execution_time|"
    r"(cost|step|turn|token|time|context)[ _-]?(limit|window|budget)|"
    r"maximum (number of )?(steps|turns|iterations)|\btimed? ?out\b",
    re.IGNORECASE,
)
_ERRORS = re.compile(r"exit_format|exit_error|exit_api|\berror\b", re.IGNORECASE)
_TRACEBACK_FRAMES = 2
_LISTING_MIN_LINES = 8
_LISTING_SHARE = 0.6
_TEST_CONTEXT_LINES = 3


# ---------------------------------------------------------------- cuts


def cut_middle(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: its head and tail around ``[... N chars cut ...]``."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    for _ in range(4):
        # The marker's own length changes the cut; a round or two settles its digit count.
        marker = f"\n[... {cut} chars cut ...]\n"
        keep = max(limit - len(marker), 0)
        if len(text) - keep == cut:
            break
        cut = len(text) - keep
    if keep == 0:
        return marker.strip()[:limit]
    head = (keep + 1) // 2
    return f"{text[:head]}{marker}{text[len(text) - (keep - head) :]}"


def _cut_lines_middle(lines: list[str], limit: int) -> str:
    """Whole lines from both ends around ``[... N lines (M chars) cut ...]``, within `limit`."""
    text = "\n".join(lines)
    if len(text) <= limit:
        return text
    head: list[str] = []
    tail: list[str] = []
    used, low, high = 0, 0, len(lines) - 1
    marker_room = len(f"[... {len(lines)} lines ({len(text)} chars) cut ...]") + 2
    take_head = True
    while low <= high:
        line = lines[low] if take_head else lines[high]
        if used + len(line) + 1 + marker_room > limit:
            break
        used += len(line) + 1
        if take_head:
            head.append(line)
            low += 1
        else:
            tail.insert(0, line)
            high -= 1
        take_head = not take_head
    dropped = lines[low : high + 1]
    if not head and not tail:
        return cut_middle(text, limit)
    marker = f"[... {len(dropped)} lines ({len(chr(10).join(dropped))} chars) cut ...]"
    return "\n".join([*head, marker, *tail])


# ---------------------------------------------------------------- observation types


def is_test_result(text: str) -> bool:
    """Output of a test run: a pytest/unittest summary line or per-test FAILED/ERROR lines."""
    return any(_TEST_SUMMARY.search(line) or _TEST_OUTCOME.search(line) for line in _lines(text))


def is_traceback(text: str) -> bool:
    """A Python traceback: its header, or a ``File "...", line N`` frame, then an error line."""
    lines = _lines(text)
    framed = _TRACEBACK_START in text or any(_FRAME.match(line) for line in lines)
    return framed and any(_ERROR_LINE.match(line) for line in lines)


def is_listing(text: str) -> bool:
    """A long listing (ls, find, grep -n, cat -n): most of ≥ 8 non-empty lines look like rows."""
    rows = [line for line in _lines(text) if line.strip()]
    if len(rows) < _LISTING_MIN_LINES:
        return False
    return sum(bool(_LISTING_LINE.match(line)) for line in rows) >= _LISTING_SHARE * len(rows)


def observation_type(text: str) -> ObservationType:
    """The first type that matches, in order test → traceback → listing (pytest output holds
    tracebacks; a traceback's frames are not a listing), else ``"text"``."""
    if is_test_result(text):
        return "test"
    if is_traceback(text):
        return "traceback"
    if is_listing(text):
        return "listing"
    return "text"


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _keep_lines(lines: list[str], ranked: dict[int, int], limit: int) -> str:
    """The ranked lines that fit in `limit`, highest rank first (later lines first among equals),
    shown in their order with each run of skipped lines as one ``[... N lines cut ...]`` marker.

    Ranking (not a middle cut) is what lets an error line or a test summary survive a cap far
    below the observation's size.
    """
    marker_room = len(f"[... {len(lines)} lines cut ...]") + 1
    chosen: set[int] = set()
    used = marker_room  # a trailing or leading run of skipped lines
    for i in sorted(ranked, key=lambda i: (-ranked[i], -i)):
        cost = len(lines[i]) + 1 + marker_room
        if used + cost <= limit:
            chosen.add(i)
            used += cost
    out: list[str] = []
    skipped = 0
    for i, line in enumerate(lines):
        if i in chosen:
            if skipped:
                out.append(f"[... {skipped} lines cut ...]")
            out.append(line)
            skipped = 0
        else:
            skipped += 1
    if skipped:
        out.append(f"[... {skipped} lines cut ...]")
    # Only a single line longer than the cap leaves nothing chosen: cut that text instead.
    return "\n".join(out) if chosen else cut_middle("\n".join(lines), limit)


def _traceback_ranks(lines: list[str]) -> dict[int, int]:
    """Error lines (and their continuation) rank 3, the last frame 2, the one before 1, the
    header 0; other lines are not kept."""
    ranks: dict[int, int] = {}
    frames = [i for i, line in enumerate(lines) if _FRAME.match(line)]
    for rank, i in (
        (1, frames[-2] if len(frames) > 1 else None),
        (2, frames[-1] if frames else None),
    ):
        if i is not None:
            ranks[i] = rank
            if i + 1 < len(lines) and lines[i + 1].strip() and not _FRAME.match(lines[i + 1]):
                ranks[i + 1] = rank  # the frame's source line
    for i, line in enumerate(lines):
        if line.strip() == _TRACEBACK_START:
            ranks.setdefault(i, 0)
        elif _ERROR_LINE.match(line):
            ranks[i] = 3
            # An exception message can run over a few lines: keep its non-blank continuation.
            for j in range(i + 1, min(i + 3, len(lines))):
                if not lines[j].strip() or _FRAME.match(lines[j]):
                    break
                ranks[j] = 3
    return ranks


def _test_ranks(lines: list[str]) -> dict[int, int]:
    """Summary lines rank 5, per-test failures 4, assertion/error lines 3 with a little context
    before them at 1, then the traceback ranks; passing tests are not kept."""
    ranks = _traceback_ranks(lines)
    for i, line in enumerate(lines):
        if _TEST_SUMMARY.search(line):
            ranks[i] = 5
        elif _TEST_FAILURE.search(line):
            ranks[i] = 4
        elif line.startswith("E ") or _ERROR_LINE.match(line):
            ranks[i] = 3
            for j in range(max(i - _TEST_CONTEXT_LINES, 0), i):
                ranks.setdefault(j, 1)
    return ranks


def compact_observation(text: str, limit: int) -> str:
    """An observation in at most `limit` characters, keeping what its type says matters.

    Test results keep summary lines, per-test FAILED/ERROR lines and error lines (with a little
    context); tracebacks keep the header, the last two frames and the error line, dropped in the
    reverse of that order when the cap is tight; listings and other text are cut in the middle
    (whole lines for listings) with a marker of how much was cut.
    """
    if len(text) <= limit:
        return text
    kind = observation_type(text)
    lines = _lines(text)
    if kind == "test":
        return _keep_lines(lines, _test_ranks(lines), limit)
    if kind == "traceback":
        return _keep_lines(lines, _traceback_ranks(lines), limit)
    if kind == "listing":
        return _cut_lines_middle(lines, limit)
    return cut_middle(text, limit)


# ---------------------------------------------------------------- turns and exit status


@dataclass(frozen=True)
class CompactCaps:
    """Character caps of the compact form (recipe `serializer.*_max_chars`)."""

    reasoning: int = 600
    command: int = 400
    observation: int = 1200


def compact_assistant(
    message: ChatMessage, caps: CompactCaps, call_text: Callable[[str, str], str]
) -> str:
    """Reasoning cut to `caps.reasoning` characters, then each call cut to `caps.command`."""
    lines = [cut_middle(message.content, caps.reasoning)] if message.content else []
    lines += [cut_middle(call_text(name, args), caps.command) for name, args in message.tool_calls]
    return "\n".join(lines)


def exit_status(conv: Conversation) -> ExitStatus:
    """How the run ended, from the conversation alone (every input shape gives the same answer).

    ``submitted`` when there is a final output; else ``limits`` when the last messages mention a
    cost/step/time/context limit (SWE-agent's ``exit_cost``, ...); ``error`` when they end in a
    traceback or an error; else ``no submission``.
    """
    if conv.final_output is not None:
        return "submitted"
    tail = [m.content for m in conv.messages[-3:] if m.content]
    if any(_LIMITS.search(text) for text in tail):
        return "limits"
    if any(is_traceback(text) or _ERRORS.search(text) for text in tail[-2:]):
        return "error"
    return "no submission"


# ---------------------------------------------------------------- listwise group of patches

GROUP_INSTRUCTION = (
    "Below is an issue and candidate patches for it. Judge which candidates resolve the issue."
)
_GROUP_TRIES = 6


@dataclass(frozen=True)
class PatchGroup:
    """One task's candidate patches as one text, with the spans a listwise head pools on.

    Attributes:
        text: Instruction, ``=== ISSUE ===`` head, then per candidate ``=== CANDIDATE i (exit
            status) ===`` and its patch (``(none)`` without one), cut in the middle to an even
            share of the budget.
        header_spans: ``(start, end)`` character offsets of each candidate's header line.
        patch_spans: ``(start, end)`` character offsets of each candidate's patch text; map them
            to tokens with a fast tokenizer's ``offset_mapping`` to pool per candidate.
    """

    text: str
    header_spans: tuple[tuple[int, int], ...]
    patch_spans: tuple[tuple[int, int], ...]


def _cut_to_tokens(
    text: str, limit: int, count: Callable[[str], int], keep: Literal["head", "middle"]
) -> str:
    """The longest head (or middle cut) of `text` within `limit` tokens, found by bisection."""
    if count(text) <= limit:
        return text
    low, high, best = 0, len(text), ""
    while low <= high:
        chars = (low + high) // 2
        cut = text[:chars] + "\n[... cut ...]" if keep == "head" else cut_middle(text, chars)
        if count(cut) <= limit:
            best, low = cut, chars + 1
        else:
            high = chars - 1
    return best


def _assemble(issue: str, bodies: list[str], headers: list[str]) -> PatchGroup:
    text = f"{GROUP_INSTRUCTION}\n=== ISSUE ===\n{issue}"
    header_spans, patch_spans = [], []
    for header, body in zip(headers, bodies, strict=True):
        text += "\n"
        header_spans.append((len(text), len(text) + len(header)))
        text += header + "\n"
        patch_spans.append((len(text), len(text) + len(body)))
        text += body
    return PatchGroup(text, tuple(header_spans), tuple(patch_spans))


def patch_group(
    convs: list[Conversation], count: Callable[[str], int], max_tokens: int
) -> PatchGroup:
    """Candidates' patches for one task under numbered headers, the budget split evenly.

    The issue keeps its head (at most 1/4 of the budget); what is left after the fixed frame is
    shared evenly, each patch cut in the middle to its share (short patches leave theirs
    unused). The whole text is measured and the shares shrunk until it fits `max_tokens`.
    """
    issue = _cut_to_tokens(convs[0].task, max_tokens // 4, count, "head")
    headers = [f"=== CANDIDATE {i} ({exit_status(c)}) ===" for i, c in enumerate(convs, 1)]
    patches = [c.final_output if c.final_output is not None else "(none)" for c in convs]
    frame = count(_assemble(issue, [""] * len(convs), headers).text)
    share = max((max_tokens - frame) // len(convs), 0)
    for _ in range(_GROUP_TRIES):
        group = _assemble(
            issue, [_cut_to_tokens(p, share, count, "middle") for p in patches], headers
        )
        excess = count(group.text) - max_tokens
        if excess <= 0:
            return group
        share = max(share - (excess + len(convs) - 1) // len(convs), 0)
    group = _assemble(issue, [""] * len(convs), headers)
    if count(group.text) > max_tokens:
        raise ValueError(
            f"max_tokens={max_tokens} is too small for the headers of {len(convs)} candidates"
        )
    return group
