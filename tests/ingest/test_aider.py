"""Aider adapter: real `.aider.llm.history` and `.aider.chat.history.md` files, checked against
their text (call blocks, `####` prompt groups, session headers)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import trajlake as tl
from trajlake.ingest import BadRecord, ParsedTrajectory, SourceFile
from trajlake.ingest._sources import read_head
from trajlake.ingest.aider import AiderAdapter
from trajlake.records import normalize
from trajlake.schema import CanonicalTrajectory

SHARED_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
DATA = Path(__file__).parents[1] / "data" / "aider"
LLM_EXCERPT = DATA / "jkassemi_friendly_names" / ".aider.llm.history"
CHAT = DATA / "BeehiveInnovations_zen-mcp-server" / ".aider.chat.history.md"
INPUT = DATA / "BeehiveInnovations_zen-mcp-server" / ".aider.input.history"
LLM_FULL = SHARED_CORPUS / "05_coding_cli_sessions/aider/jkassemi_friendly_names/.aider.llm.history"
needs_corpus = pytest.mark.skipif(not LLM_FULL.exists(), reason="shared corpus not available")


def _source(path: Path) -> SourceFile:
    return SourceFile(str(path), os.path.getsize(path))


def _items(path: Path) -> list[ParsedTrajectory | BadRecord]:
    source = _source(path)
    with source.open() as stream:
        return list(AiderAdapter().read(source, stream))


def _records(path: Path) -> list[CanonicalTrajectory]:
    items = _items(path)
    assert all(isinstance(i, ParsedTrajectory) for i in items), items
    return [normalize(i.record) for i in items if isinstance(i, ParsedTrajectory)]


def _responses(path: Path) -> list[str]:
    """Each LLM RESPONSE block's text, with the `ASSISTANT ` prefixes removed."""
    blocks = re.split(r"^(?:TO LLM|LLM RESPONSE) \S+\n", path.read_text(), flags=re.M)[1:]
    heads = re.findall(r"^(TO LLM|LLM RESPONSE) ", path.read_text(), flags=re.M)
    return [
        "\n".join(ln.removeprefix("ASSISTANT").removeprefix(" ") for ln in body.splitlines())
        for head, body in zip(heads, blocks, strict=True)
        if head == "LLM RESPONSE"
    ]


def _check_llm(path: Path) -> list[CanonicalTrajectory]:
    text = path.read_text()
    n_calls = len(re.findall(r"^TO LLM \S+$", text, flags=re.M))
    assert n_calls == len(re.findall(r"^LLM RESPONSE \S+$", text, flags=re.M))
    records = _records(path)
    indexes = sorted(i for r in records for i in (r.attrs or {})["call_indexes"])
    assert indexes == list(range(n_calls))  # every call lands in exactly one conversation
    answered = [m for r in records for m in r.messages if m.attrs and "call_index" in m.attrs]
    assert sorted(m.attrs["call_index"] for m in answered if m.attrs) == list(range(n_calls))
    by_call = {m.attrs["call_index"]: m for m in answered if m.attrs}
    for k, response in enumerate(_responses(path)):
        assert by_call[k].role == "assistant"
        assert by_call[k].content == response
        assert by_call[k].timestamp is not None
    for r in records:
        assert r.harness == "aider" and r.policy_model is None and r.task_id is None
        assert r.messages[0].role == "system"
        assert r.messages[-1].role == "assistant"
        assert r.n_turns == sum(1 for m in r.messages if m.role == "assistant")
        assert r.prompt_tokens is None  # the raw log has no usage
    assert len({r.trajectory_id for r in records}) == len(records)
    return records


def test_llm_history_excerpt_chains_calls_into_conversations() -> None:
    records = _check_llm(LLM_EXCERPT)
    # Calls 0-3 (ask mode) extend one chat; after /clear calls 4 and 6 (architect) form a
    # second; calls 5 and 7 are editor calls, which receive the plan as a user message.
    assert [r.attrs["call_indexes"] for r in records if r.attrs] == [[0, 1, 2, 3], [4, 6], [5], [7]]
    first = records[0]
    # Request 3 (lines 887-1421) has 12 `-------` separators, hence 12 messages + the response.
    lines = LLM_EXCERPT.read_text().splitlines()
    assert sum(1 for ln in lines[886:1421] if ln == "-------") == 12
    assert len(first.messages) == 13
    assert [m.role for m in first.messages[:3]] == ["system", "user", "assistant"]
    assert first.messages[1].content is not None
    assert first.messages[1].content.startswith(
        "Here are summaries of some files present in my git"
    )
    assert str(first.started_at) == "2025-01-31 11:21:36+00:00"
    assert str(first.ended_at) == "2025-01-31 11:24:06+00:00"
    # The user prompt of call 1 (sent 11:23:00) precedes the response of call 0.
    stamped = [(m.role, str(m.timestamp)) for m in first.messages if m.timestamp]
    assert stamped[:3] == [
        ("user", "2025-01-31 11:21:36+00:00"),
        ("assistant", "2025-01-31 11:21:41+00:00"),
        ("user", "2025-01-31 11:23:00+00:00"),
    ]
    assert first.messages[5].content is not None
    assert first.messages[5].content.startswith("This project is a super simple random friendly")


@needs_corpus
def test_llm_history_full_file() -> None:
    records = _check_llm(LLM_FULL)
    # 33 calls → 16 conversations: a 4-call ask chat, the 13-call architect chat, 10 editor
    # calls, and after the 15:04 restart two 2-call chats and two single calls (/clear between).
    assert len(records) == 16
    sizes = sorted(len(r.attrs["call_indexes"]) for r in records if r.attrs)
    assert sizes == [1] * 12 + [2, 2, 4, 13]


def _prompt_groups(text: str) -> list[list[str]]:
    """Sessions' `####` prompt groups (consecutive `####` lines), counted from the raw text."""
    sessions: list[list[str]] = []
    previous = ""
    for line in text.splitlines():
        if line.startswith("# aider chat started at "):
            sessions.append([])
        elif line.startswith("####") and not previous.startswith("####"):
            sessions[-1].append(line)
        previous = line
    return sessions


def test_chat_history_sessions_prompts_and_harness_output() -> None:
    text = CHAT.read_text()
    groups = _prompt_groups(text)
    assert [len(g) for g in groups] == [0, 1, 0, 7]  # 4 sessions, 2 with prompts
    records = _records(CHAT)
    assert len(records) == sum(1 for g in groups if g)
    assert [sum(m.role == "user" for m in r.messages) for r in records] == [1, 7]
    for r in records:
        assert r.harness == "aider" and r.harness_version == "0.86.1"
        assert r.policy_model == "gemini/gemini-2.5-pro-preview-06-05"
        assert r.attrs and r.attrs["weak_model"] == "gemini/gemini-2.5-flash-preview-04-17"
        assert "Aider v0.86.1" in r.attrs["banner"]
        assert not any(m.role == "assistant" for m in r.messages)  # no reply ever came back
        assert all(m.name == "aider" for m in r.messages if m.role == "tool")
    first, last = records
    assert str(first.started_at) == "2025-10-20 21:49:22+00:00"
    assert [m.role for m in first.messages] == ["user", "tool"]
    assert first.messages[0].content == "/add **"
    assert first.messages[1].content == "^C again to exit\n\n\n^C KeyboardInterrupt"
    assert [m.role for m in last.messages] == ["user", "tool"] * 7
    add = last.messages[0].content or ""
    assert (
        add.splitlines()[0] == "/add /home/dragonfsky/git/github/zen-mcp-server/utils/file_utils.py"
    )
    assert len(add.splitlines()) == 8
    assert (last.messages[1].content or "").startswith("Added config.py to the chat")
    again = [r.trajectory_id for r in _records(CHAT)]
    assert again == [r.trajectory_id for r in records]


SYNTHETIC = """\
# aider chat started at 2024-06-01 10:00:00

> /usr/bin/aider --model gpt-4o¶
> Aider v0.40.0¶
> Main model: gpt-4o with diff edit format¶

#### add a hello function¶
#### to hello.py¶

--------------
► **THINKING**

The user wants a function.

------------
► **ANSWER**

Here is the change:

hello.py
```python
<<<<<<< SEARCH
=======
> not a quote, inside the fence
def hello():
    print("hello")
>>>>>>> REPLACE
```

> Tokens: 3.2k sent, 1.1k cache hit, 222 received. Cost: $0.01 message, $0.02 session.¶
> Applied edit to hello.py¶
> Commit abc1234 feat: add hello¶

#### /run pytest¶
> Running pytest¶
collected 1 item
1 passed¶
""".replace("¶\n", "  \n")  # aider ends the lines it writes with two spaces


def test_chat_history_replies_usage_and_edits(tmp_path: Path) -> None:
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(SYNTHETIC)
    (record,) = _records(path)
    assert [m.role for m in record.messages] == ["user", "assistant", "tool", "user", "tool"]
    user, reply, tool, _, run = record.messages
    assert user.content == "add a hello function\nto hello.py"
    assert reply.reasoning == "The user wants a function."
    assert reply.content is not None and reply.content.startswith("Here is the change:")
    assert "> not a quote, inside the fence" in reply.content
    assert (reply.prompt_tokens, reply.cached_tokens, reply.completion_tokens) == (3200, 1100, 222)
    assert reply.model == "gpt-4o"
    assert reply.attrs is not None and reply.attrs["tokens_approximate"] is True
    assert reply.attrs["tokens_raw"].startswith("Tokens: 3.2k sent")
    assert reply.attrs["applied_edits"] == ["hello.py"]
    assert reply.attrs["commits"] == ["abc1234 feat: add hello"]
    assert tool.name == "aider" and (tool.content or "").startswith("Tokens: 3.2k sent")
    assert run.content == "Running pytest\ncollected 1 item\n1 passed"  # unquoted continuation
    assert (record.policy_model, record.harness_version, record.cost_usd) == (
        "gpt-4o",
        "0.40.0",
        0.02,
    )


def test_llm_history_bad_blocks_are_quarantined(tmp_path: Path) -> None:
    path = tmp_path / ".aider.llm.history"
    path.write_text(
        "LLM RESPONSE 2025-01-01T00:00:00\nASSISTANT orphan\n"
        "TO LLM 2025-01-01T00:00:01\n-------\nUSER hi\n"
        "LLM RESPONSE 2025-01-01T00:00:02\nASSISTANT hello\n"
        "TO LLM 2025-01-01T00:00:03\n-------\nUSER hi\n-------\nASSISTANT hello\n"
        "-------\nUSER more\n"
    )
    items = _items(path)
    assert isinstance(items[0], BadRecord) and items[0].line == 1
    (record,) = [normalize(i.record) for i in items if isinstance(i, ParsedTrajectory)]
    assert [m.content for m in record.messages] == ["hi", "hello", "more"]
    assert record.attrs and record.attrs["last_call_unanswered"] is True


def test_sniff_is_specific() -> None:
    adapter = AiderAdapter()
    for path in (LLM_EXCERPT, CHAT):
        assert adapter.sniff(_source(path), read_head(_source(path))) >= 0.9
    others = [INPUT, CHAT.parent / "LICENSE", LLM_EXCERPT.parent / "SOURCE.txt"]
    others += [p for p in (DATA.parent).rglob("*") if p.is_file() and "aider" not in p.parts]
    claimed = [p for p in others if adapter.sniff(_source(p), read_head(_source(p))) > 0]
    assert claimed == []
    companion = adapter.companion_of(_source(INPUT), frozenset({str(CHAT), str(INPUT)}))
    assert companion == str(CHAT)
    assert adapter.companion_of(_source(INPUT), frozenset({str(INPUT)})) is None


def test_lake_ingest_auto_and_sql(lake: tl.Lake) -> None:
    report = lake.ingest(str(DATA))
    assert (report.added, report.quarantined, report.files_companion) == (4 + 2, 0, 1)
    roles = dict(lake.sql("SELECT role, count(*) FROM messages GROUP BY role").rows())
    # llm excerpt: requests 3, 6, 5, 7 hold S+6U+5A, S+5U+4A, S+2U+A, S+2U+A, each + 1 response;
    # chat log: sessions of 1 and 7 prompts, each answered by one aider tool output.
    assert roles == {"system": 4, "user": 6 + 5 + 2 + 2 + 8, "assistant": 6 + 5 + 2 + 2, "tool": 8}
    formats = lake.sql("SELECT DISTINCT source_format FROM trajectories").rows()
    assert formats == [("aider",)]
    again = lake.ingest(str(DATA))
    assert again.added == 0
    assert lake.sql("SELECT count(*) FROM trajectories").rows() == [(6,)]


def test_lake_ingest_with_format(lake: tl.Lake) -> None:
    lake.ingest(str(LLM_EXCERPT), format="aider")
    count = lake.sql("SELECT count(*) FROM trajectories WHERE harness = 'aider'").rows()
    assert count == [(4,)]
