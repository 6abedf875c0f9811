"""`trajlake view` in headless Chromium over the demo lake: runs (filter, sort, page, group, SQL),
the credit overlay on a transcript (one and two runs), candidates with the best-of-N pick, the
lake page's lineage graph, and the snapshot switcher; every request stays on the server's origin.
Then a `--bundle` of the same lake opened from disk shows the same transcript and credit overlay,
and filters, sorts and groups its runs in the page; every request is a file inside the bundle.
(One file, so that the demo lake is built once per test worker.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from tests.view.browser._browser import (
    assert_only_bundle_files,
    assert_only_own_origin,
    cli,
    route,
    transcript_state,
    wait_text,
)


def count(lake: tl.Lake, sql: str, params: list[Any] | None = None, at: str | None = None) -> int:
    value = lake.sql(sql, params=params, at=at).rows()[0][0]
    return int(value)


def test_runs_page_filters_sorts_pages_and_groups(
    demo_lake: tl.Lake, demo_server: str, new_page: Any
) -> None:
    from playwright.sync_api import expect

    p = new_page()
    page = p.page
    total = count(demo_lake, "SELECT count(*) FROM trajectories")
    page.goto(demo_server + "/" + route("runs", limit="25"))
    wait_text(page, ".page-info", f"^1–25 of {total:,}$")
    expect(page.locator("tr.run-row")).to_have_count(25)
    p.shot("runs")

    page.click("button.next")
    wait_text(page, ".page-info", f"^26–50 of {total:,}$")
    first_on_page_two = page.locator("tr.run-row").first.get_attribute("data-id")
    newest = demo_lake.sql(
        "SELECT trajectory_id FROM trajectories "
        "ORDER BY started_at DESC, trajectory_id LIMIT 1 OFFSET 25"
    ).rows()[0][0]
    assert first_on_page_two == newest

    # Quick filter: generation 1 only (from the meta facets).
    page.select_option("select[name=generation]", "1")
    n_gen1 = count(demo_lake, "SELECT count(*) FROM trajectories WHERE generation = 1")
    wait_text(page, ".page-info", f"^1–25 of {n_gen1:,}$")
    assert "generation=1" in page.url

    # Sort by turns, descending: the column is ordered and starts at the largest value.
    page.click("th[data-key=n_turns]")
    expect(page.locator("th.sorted-desc[data-key=n_turns]")).to_be_visible()
    turns = [int(t) for t in page.locator("tr.run-row td:nth-child(10)").all_inner_texts()]
    assert turns == sorted(turns, reverse=True)
    assert turns[0] == count(
        demo_lake, "SELECT max(n_turns) FROM trajectories WHERE generation = 1"
    )

    # SQL predicate on top of the quick filter.
    page.fill("textarea[name=where]", "t.n_turns >= 10")
    page.press("textarea[name=where]", "Enter")
    n_long = count(
        demo_lake, "SELECT count(*) FROM trajectories WHERE generation = 1 AND n_turns >= 10"
    )
    wait_text(page, ".page-info", f"of {n_long:,}$")

    # The server's error text on a bad predicate.
    page.fill("textarea[name=where]", "no_such_column > 1")
    page.press("textarea[name=where]", "Enter")
    wait_text(page, ".query-error .error-box", "no_such_column")

    # Group by resolved-ness per generation: counts and success rates from the server.
    page.goto(demo_server + "/" + route("runs", by="generation"))
    expect(page.locator(".groups-table tbody tr")).to_have_count(2)
    rows = page.locator(".groups-table tbody tr")
    by_key = {rows.nth(i).locator("td").first.inner_text(): rows.nth(i) for i in range(2)}
    n0 = count(demo_lake, "SELECT count(*) FROM trajectories WHERE generation = 0")
    assert by_key["0"].locator("td").nth(1).inner_text() == f"{n0:,}"
    p.shot("runs-grouped")
    by_key["0"].click()
    wait_text(page, ".page-info", f"of {n0:,}$")

    # A row opens its transcript.
    row = page.locator("tr.run-row").first
    trajectory_id = row.get_attribute("data-id")
    row.locator("td").nth(6).click()
    expect(page.locator(".traj-id")).to_have_text(trajectory_id)
    assert_only_own_origin(p, demo_server)


def _credited(lake: tl.Lake) -> tuple[str, list[str]]:
    """A resolved gen-0 trajectory with a rise segment, and the two credit runs to compare."""
    runs = [r[0] for r in lake.sql("SELECT DISTINCT run_name FROM credits ORDER BY 1").rows()]
    row = lake.sql(
        "SELECT c.trajectory_id FROM credits c JOIN trajectories t USING (trajectory_id) "
        "WHERE c.run_name = ? AND c.segment_id IS NOT NULL AND t.n_turns >= 6 "
        "GROUP BY 1 ORDER BY 1 LIMIT 1",
        params=[runs[0]],
    ).rows()
    return row[0][0], runs[:2]


def test_credit_overlay_colours_turns_and_draws_the_value_curve(
    demo_lake: tl.Lake, demo_server: str, new_page: Any
) -> None:
    from playwright.sync_api import expect

    trajectory_id, (run_a, run_b) = _credited(demo_lake)
    credited = count(
        demo_lake,
        "SELECT count(*) FROM credits WHERE run_name = ? AND trajectory_id = ? AND thread = 'main'",
        [run_a, trajectory_id],
    )
    p = new_page()
    page = p.page
    page.goto(demo_server + "/" + route("t", trajectory_id))
    expect(page.locator(".traj-id")).to_have_text(trajectory_id)
    expect(page.locator(".strip")).to_have_count(0)

    page.select_option("select[name=credit]", run_a)
    expect(page.locator("svg.value-curve circle.v-point")).to_have_count(credited)
    expect(page.locator(".strip.has-credit")).to_have_count(credited)
    colours = set(
        page.eval_on_selector_all(".strip.has-credit", "els => els.map(e => e.style.background)")
    )
    assert len(colours) > 1 and all(c.startswith("rgb(") for c in colours)
    expect(page.locator("svg.value-curve rect.segment-band").first).to_be_attached()
    expect(page.locator(".credit-badge .badge.seg").first).to_be_visible()

    # Clicking a marker jumps to its turn.
    last = page.locator("svg.value-curve circle.v-point").last
    turn = last.get_attribute("data-turn")
    last.click()
    expect(page.locator(f".turn.current-turn[data-turn='{turn}']")).to_be_attached()
    p.shot("credit")

    # Advantage instead of credit keeps the curve and recolours by the other column.
    page.click("button.metric-advantage")
    expect(page.locator("button.metric-advantage.on")).to_be_visible()
    assert "metric=advantage" in page.url
    expect(page.locator("svg.value-curve circle.v-point")).to_have_count(credited)

    # A second run side by side: two curves and two strips per credited turn.
    page.select_option("select[name=credit2]", run_b)
    expect(page.locator("svg.value-curve")).to_have_count(2)
    credited_b = count(
        demo_lake,
        "SELECT count(*) FROM credits WHERE run_name = ? AND trajectory_id = ? AND thread = 'main'",
        [run_b, trajectory_id],
    )
    expect(page.locator(f"svg.value-curve[data-run='{run_b}'] circle.v-point")).to_have_count(
        credited_b
    )
    expect(page.locator(".strip.strip-1.has-credit")).to_have_count(credited_b)
    p.shot("credit-compare")
    assert_only_own_origin(p, demo_server)


def test_candidates_show_every_rollout_with_the_pick_on_the_top_score(
    demo_lake: tl.Lake, demo_server: str, new_page: Any
) -> None:
    from playwright.sync_api import expect

    task, model = demo_lake.sql(
        "SELECT t.task_id, s.model_id FROM trajectories t JOIN scores s USING (trajectory_id) "
        "WHERE s.turn IS NULL GROUP BY 1, 2 HAVING count(*) >= 4 ORDER BY 1 LIMIT 1"
    ).rows()[0]
    n = count(demo_lake, "SELECT count(*) FROM trajectories WHERE task_id = ?", [task])
    best = demo_lake.sql(
        "SELECT s.trajectory_id FROM scores s JOIN trajectories t USING (trajectory_id) "
        "WHERE t.task_id = ? AND s.model_id = ? AND s.turn IS NULL ORDER BY s.score DESC LIMIT 1",
        params=[task, model],
    ).rows()[0][0]
    p = new_page()
    page = p.page
    page.goto(demo_server + "/" + route("candidates", task))
    expect(page.locator(".cand-col-head")).to_have_count(n)
    expect(page.locator(".picked-badge")).to_have_count(1)
    picked = page.locator(".cand-col-head:has(.picked-badge)")
    assert picked.get_attribute("data-id") == best
    # Ranked left to right: the pick is the first column, rank 1.
    assert page.locator(".cand-col-head").first.get_attribute("data-id") == best
    expect(picked.locator(".badge.rank")).to_have_text("rank 1")
    turns_of_best = count(
        demo_lake,
        "SELECT count(DISTINCT turn) FROM messages "
        "WHERE trajectory_id = ? AND thread = 'main' AND turn IS NOT NULL",
        [best],
    )
    expect(page.locator(f".cand-cell[data-id='{best}']")).to_have_count(turns_of_best)
    p.shot("candidates")

    # A turn opens that transcript at that turn.
    page.locator(f".cand-cell[data-id='{best}'][data-turn='1']").click()
    expect(page.locator(".traj-id")).to_have_text(best)
    expect(page.locator(".turn.current-turn[data-turn='1']")).to_be_attached()
    assert_only_own_origin(p, demo_server)


def test_lake_page_draws_the_lineage_and_lists_tags(
    demo_lake: tl.Lake, demo_server: str, new_page: Any
) -> None:
    from playwright.sync_api import expect

    graph = json.loads(cli("lineage", "--lake", demo_lake.uri, "--output", "json"))
    p = new_page()
    page = p.page
    page.goto(demo_server + "/" + route("lake"))
    expect(page.locator("svg.lineage g.node")).to_have_count(len(graph["nodes"]))
    expect(page.locator("svg.lineage path.edge")).to_have_count(len(graph["edges"]))
    assert len(graph["edges"]) > 0
    # Edges run left to right: every edge starts right of where it ends' node begins.
    for d in page.eval_on_selector_all(
        "svg.lineage path.edge", "els => els.map(e => e.getAttribute('d'))"
    ):
        start, end = d.split(" C")[0][1:].split(","), d.split(" ")[-1].split(",")
        assert float(start[0]) < float(end[0])
    expect(page.locator(".tags-table tbody tr")).to_have_count(len(demo_lake.tags()))
    expect(page.locator(".credit-runs-table tbody tr")).to_have_count(
        count(demo_lake, "SELECT count(DISTINCT run_name) FROM credits")
    )
    p.shot("lake")
    assert_only_own_origin(p, demo_server)


def test_snapshot_switcher_keeps_the_route(
    demo_lake: tl.Lake, demo_server: str, new_page: Any
) -> None:
    from playwright.sync_api import expect

    p = new_page()
    page = p.page
    page.goto(demo_server + "/" + route("runs", generation="0", limit="25"))
    n_gen0 = count(demo_lake, "SELECT count(*) FROM trajectories WHERE generation = 0")
    wait_text(page, ".page-info", f"of {n_gen0:,}$")  # the header is filled in by then
    options = page.locator("#ref-select option").all_inner_texts()
    tags = [t.name for t in demo_lake.tags()]
    assert all(any(o.startswith(tag + " (tag") for o in options) for tag in tags)
    page.select_option("#ref-select", "gen-0")
    at_tag = count(demo_lake, "SELECT count(*) FROM trajectories WHERE generation = 0", at="gen-0")
    wait_text(page, ".page-info", f"of {at_tag:,}$")
    assert "at=gen-0" in page.url and "generation=0" in page.url
    expect(page.locator("nav a[data-nav=lake]")).to_have_attribute("href", "#/lake?at=gen-0")
    # An unknown snapshot, trajectory or task is reported, not a blank page.
    page.goto(demo_server + "/" + route("runs", at="no-such-tag"))
    wait_text(page, ".error-box", "no-such-tag")
    page.goto(demo_server + "/" + route("t", "no-such-trajectory"))
    wait_text(page, "#app .error-box", "no-such-trajectory.*HTTP 404")
    page.goto(demo_server + "/" + route("candidates", "no-such-task"))
    wait_text(page, "#app .error-box", "no-such-task")
    assert_only_own_origin(p, demo_server)


# ---- the same lake as a static bundle, opened from disk ----

WHERE = "generation = 0"


@pytest.fixture(scope="module")
def bundle(demo_lake: tl.Lake, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("view-bundle") / "bundle"
    cli("view", "--lake", demo_lake.uri, "--bundle", folder, "--where", WHERE, "--limit", "30")
    return folder


def bundle_data(folder: Path) -> dict[str, Any]:
    text = (folder / "data" / "bundle.js").read_text(encoding="utf-8")
    prefix = "window.TRAJLAKE_BUNDLE = "
    assert text.startswith(prefix)
    data: dict[str, Any] = json.loads(text[len(prefix) :].rstrip().rstrip(";"))
    return data


def two_credited_runs(data: dict[str, Any]) -> tuple[str, str, str]:
    """A bundled trajectory with credit files of two runs, and those runs."""
    runs_of: dict[str, list[str]] = {}
    for key in data["files"]:
        if key.startswith("credit:"):
            _, run, trajectory_id = key.split(":", 2)
            runs_of.setdefault(trajectory_id, []).append(run)
    trajectory_id = sorted(t for t, runs in runs_of.items() if len(runs) >= 2)[0]
    first, second = sorted(runs_of[trajectory_id])[:2]
    return trajectory_id, first, second


def test_bundle_shows_the_same_transcript_and_credit_as_the_server(
    bundle: Path, demo_server: str, new_page: Any
) -> None:
    from playwright.sync_api import expect

    data = bundle_data(bundle)
    trajectory_id, run_a, run_b = two_credited_runs(data)
    hash_route = route("t", trajectory_id, credit=run_a, credit2=run_b)

    served = new_page()
    served.page.goto(demo_server + "/" + hash_route)
    expect(served.page.locator("svg.value-curve")).to_have_count(2)
    on_server = transcript_state(served.page)

    opened = new_page()
    opened.page.goto((bundle / "index.html").resolve().as_uri() + hash_route)
    expect(opened.page.locator("svg.value-curve")).to_have_count(2)
    from_disk = transcript_state(opened.page)
    expect(opened.page.locator("#mode-badge")).to_contain_text("bundle")
    opened.shot("bundle-transcript")

    assert from_disk == on_server
    assert len(from_disk["curves"][0]["points"]) > 0
    assert any(colour for strips in from_disk["strips"] for colour in strips)
    assert_only_own_origin(served, demo_server)
    assert opened.requests, "no requests were recorded for the bundle page"
    assert_only_bundle_files(opened, bundle)


def test_bundle_runs_are_filtered_sorted_and_grouped_in_the_page(
    bundle: Path, demo_lake: tl.Lake, new_page: Any
) -> None:
    from playwright.sync_api import expect

    data = bundle_data(bundle)
    rows = data["runs"]
    index = (bundle / "index.html").resolve().as_uri()
    p = new_page()
    page = p.page
    page.goto(index + route("runs", limit="25"))
    wait_text(page, ".page-info", f"^1–25 of {len(rows)}$")
    # No SQL engine in a bundle: the predicate box is not offered.
    expect(page.locator("textarea[name=where]")).to_have_count(0)
    page.click("button.next")
    wait_text(page, ".page-info", f"^26–{len(rows)} of {len(rows)}$")

    page.select_option("select[name=resolved]", "true")
    resolved = [r for r in rows if r["resolved"] is True]
    wait_text(page, ".page-info", f"of {len(resolved)}$")
    page.click("th[data-key=n_turns]")
    expect(page.locator("th.sorted-desc[data-key=n_turns]")).to_be_visible()
    turns = [int(t) for t in page.locator("tr.run-row td:nth-child(10)").all_inner_texts()]
    assert turns == sorted((r["n_turns"] for r in resolved), reverse=True)[: len(turns)]

    page.goto(index + route("runs", by="run_id"))
    groups = page.locator(".groups-table tbody tr")
    expect(groups).to_have_count(len({r["run_id"] for r in rows}))
    n_all = groups.first.locator("td").nth(1).inner_text()
    assert int(n_all) == max(
        sum(1 for r in rows if r["run_id"] == run) for run in {r["run_id"] for r in rows}
    )
    # Every bundled row matches the bundle's selection.
    ids = [r["trajectory_id"] for r in rows]
    matching = demo_lake.sql(
        "SELECT count(*) FROM trajectories "
        "WHERE generation = 0 AND list_contains(?, trajectory_id)",
        params=[ids],
    ).rows()[0][0]
    assert matching == len(ids)
    p.shot("bundle-runs")
    assert_only_bundle_files(p, bundle)
