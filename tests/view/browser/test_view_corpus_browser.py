"""`trajlake view` in headless Chromium over trajectories ingested from real SWE-agent,
mini-swe-agent, OpenHands, Claude Code and Inspect files: every harness's transcript renders,
and a long Claude Code session shows its roles, tool calls, exit codes, diffs, collapsed outputs,
subagent threads and search, painting only the turns near the viewport."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any

import pytest

import trajlake as tl
from tests.view.browser._browser import assert_only_own_origin, route, wait_text

HARNESSES = ["swe-agent", "mini-swe-agent", "openhands", "claude-code", "inspect_ai"]


def longest(lake: tl.Lake, harness: str) -> str:
    rows = lake.sql(
        "SELECT trajectory_id FROM trajectories WHERE harness = ? "
        "ORDER BY n_messages DESC, trajectory_id LIMIT 1",
        params=[harness],
    ).rows()
    assert rows, f"the corpus lake has no {harness} trajectory"
    return str(rows[0][0])


def api(base: str, endpoint: str, **params: str) -> Any:
    """A payload from the server, to find where in a transcript to look."""
    url = f"{base}/api/{endpoint}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def jumped_to(page: Any, turn: int) -> Any:
    """The main-thread turn a `turn=` address jumped to, once filled in. A new address in the
    same page changes only the hash: until the page has rendered it, the old transcript (its
    own, differently expanded copy of the turn) is still there."""
    from playwright.sync_api import expect

    block = page.locator(f".turn.current-turn.rendered[data-thread=main][data-turn='{turn}']")
    expect(block).to_have_count(1)
    return block


@pytest.mark.parametrize("harness", HARNESSES)
def test_every_harness_transcript_renders(
    corpus_lake: tl.Lake, corpus_server: str, new_page: Any, harness: str
) -> None:
    from playwright.sync_api import expect

    trajectory_id = longest(corpus_lake, harness)
    roles = {
        r[0]
        for r in corpus_lake.sql(
            "SELECT DISTINCT role FROM messages WHERE trajectory_id = ? AND turn IS NULL",
            params=[trajectory_id],
        ).rows()
    }
    p = new_page()
    page = p.page
    page.goto(corpus_server + "/" + route("t", trajectory_id))
    expect(page.locator(".traj-id")).to_have_text(trajectory_id)
    expect(page.locator(".msg").first).to_be_visible()
    # The messages before the first turn are on screen at once, each with its role's style.
    for role in roles:
        expect(page.locator(f".turn[data-turn=pre] .msg.role-{role}").first).to_be_visible()
    assert page.locator(".error-box").count() == 0
    wait_text(page, ".transcript-header", harness)
    assert_only_own_origin(p, corpus_server)


def test_runs_filter_by_harness_on_real_data(
    corpus_lake: tl.Lake, corpus_server: str, new_page: Any
) -> None:
    from playwright.sync_api import expect

    n = corpus_lake.sql("SELECT count(*) FROM trajectories WHERE harness = 'openhands'").rows()
    p = new_page()
    page = p.page
    page.goto(corpus_server + "/" + route("runs"))
    page.select_option("select[name=harness]", "openhands")
    expect(page.locator("tr.run-row")).to_have_count(n[0][0])
    assert set(page.locator("tr.run-row td:nth-child(3)").all_inner_texts()) == {"openhands"}
    assert_only_own_origin(p, corpus_server)


def test_long_session_tools_diffs_threads_search(
    corpus_lake: tl.Lake, corpus_server: str, new_page: Any
) -> None:
    from playwright.sync_api import expect

    trajectory_id = longest(corpus_lake, "claude-code")
    data = api(corpus_server, "trajectory", id=trajectory_id)
    main = [t for t in data["turns"] if t["thread"] == "main"]
    p = new_page()
    page = p.page
    page.goto(corpus_server + "/" + route("t", trajectory_id))
    expect(page.locator(".turn.rendered").first).to_be_attached()
    # Only the turns near the viewport are painted; the rest are placeholders.
    assert page.locator(".turn").count() == len(data["turns"])
    assert 0 < page.locator(".turn.rendered").count() < len(data["turns"]) // 2
    expect(page.locator(".msg.role-user").first).to_be_visible()
    expect(page.locator(".msg.role-assistant").first).to_be_visible()
    expect(page.locator(".msg.role-tool").first).to_be_visible()
    expect(page.locator(".tool-call .tool-name").first).to_be_visible()
    p.shot("transcript")

    # Subagent threads in their own labelled sections, after the main thread.
    others = [t["thread"] for t in data["threads"] if t["thread"] != "main"]
    assert others, "the session has subagent threads"
    expect(page.locator("section.side-thread")).to_have_count(len(others))
    headings = page.locator("section.side-thread .thread-heading").all_inner_texts()
    assert all(any(o in h for h in headings) for o in others)

    # An edit as a coloured diff, at the first turn that has one.
    edit_turn = next(t["turn"] for t in main if t["edits"])
    page.goto(corpus_server + "/" + route("t", trajectory_id, turn=str(edit_turn)))
    block = jumped_to(page, edit_turn)
    expect(block.locator(".diff-line.add, .diff-line.del").first).to_be_visible()
    p.shot("transcript-diff")

    # A long output collapsed to 20 lines, expanded by "show all".
    long_turn, long_text = next(
        (t["turn"], m["content"])
        for t in main
        for m in t["messages"]
        if m["role"] == "tool" and isinstance(m["content"], str) and m["content"].count("\n") > 30
    )
    page.goto(corpus_server + "/" + route("t", trajectory_id, turn=str(long_turn)))
    block = jumped_to(page, long_turn)
    collapsed = block.locator(".collapsed-block").first
    expect(collapsed).to_be_visible()
    assert collapsed.locator("pre").inner_text().count("\n") == 19
    buttons = block.locator("button.show-all").count()
    collapsed.locator("button.show-all").click()
    expect(block.locator("button.show-all")).to_have_count(buttons - 1)
    assert long_text.rstrip("\n") in block.inner_text()

    # Exit codes on tool results.
    exit_turn = next(t["turn"] for t in main for m in t["messages"] if m["exit_code"] is not None)
    page.goto(corpus_server + "/" + route("t", trajectory_id, turn=str(exit_turn)))
    expect(page.locator(f".turn[data-turn='{exit_turn}'] .badge.exit-code").first).to_be_visible()

    # Search: a word from deep inside a collapsed output, far down the transcript.
    needle = _word_deep_inside(main)
    page.goto(corpus_server + "/" + route("t", trajectory_id))
    page.fill("input.transcript-search", needle)
    page.press("input.transcript-search", "Enter")
    wait_text(page, ".search-status", r"^1 / \d+$")
    total = int(page.locator(".search-status").inner_text().split("/ ")[1])
    current = page.locator("mark.hit.current")
    expect(current).to_have_count(1)
    expect(current).to_be_in_viewport()
    assert current.inner_text().lower() == needle.lower()
    if total > 1:
        page.click("button.search-next")
        wait_text(page, ".search-status", rf"^2 / {total}$")
        expect(page.locator("mark.hit.current")).to_have_count(1)
    page.click("button.search-prev")
    page.click("button.search-prev")
    wait_text(page, ".search-status", rf"^{total} / {total}$" if total > 1 else r"^1 / 1$")
    p.shot("transcript-search")
    assert_only_own_origin(p, corpus_server)


def _word_deep_inside(turns: list[dict[str, Any]]) -> str:
    """A word that occurs only below line 20 of a long tool output (so it starts collapsed)."""
    for turn in reversed(turns):
        for m in turn["messages"]:
            text = m["content"] if isinstance(m["content"], str) else ""
            lines = text.split("\n")
            if len(lines) <= 30:
                continue
            head = "\n".join(lines[:20]).lower()
            for line in lines[20:]:
                for word in sorted(line.split(), key=len, reverse=True):
                    word = word.strip("`'\",.:;()[]{}<>")
                    if len(word) >= 8 and word.isalnum() and word.lower() not in head:
                        return word
    raise AssertionError("no long output with a distinctive word below line 20")


def test_copied_context_is_marked(corpus_lake: tl.Lake, corpus_server: str, new_page: Any) -> None:
    from playwright.sync_api import expect

    rows = corpus_lake.sql(
        "SELECT trajectory_id, count(*) FROM messages WHERE is_copied_context AND turn IS NULL "
        "GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 1"
    ).rows()
    trajectory_id, n_copied = rows[0]
    p = new_page()
    page = p.page
    page.goto(corpus_server + "/" + route("t", trajectory_id))
    expect(page.locator(".turn[data-turn=pre] .msg.copied-context")).to_have_count(n_copied)
    expect(page.locator(".badge.copied").first).to_be_visible()
    assert_only_own_origin(p, corpus_server)
