"""The viewer on the demo lake: gen-1 candidates carry the value model's scores, and the rank-1
candidate of each task is the one best-of-N picked; credit runs and lineage show on the lake
page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trajlake as tl
from trajlake.demo import run_demo
from trajlake.view import ViewData

pytestmark = pytest.mark.long  # the quick demo takes ~40 s on 2 cores


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[tl.Lake, ViewData]:
    root: Path = tmp_path_factory.mktemp("demo")
    run_demo(root / "lake", quick=True, out=root / "report")
    lake = tl.open_lake(root / "lake")
    data = ViewData(lake)
    yield lake, data
    data.close()


def test_candidates_show_the_best_of_n_pick(demo: tuple[tl.Lake, ViewData]) -> None:
    lake, data = demo
    tasks = data.answer("tasks", {"generation": "1", "limit": "500"})["rows"]
    assert tasks and all(t["n_scored"] == t["n"] for t in tasks)
    for task in tasks:
        payload = data.answer("candidates", {"task_id": task["task_id"]})
        assert payload["model_id"] is not None
        picked = [c for c in payload["candidates"] if c["picked"]]
        assert len(picked) == 1 and picked[0]["rank"] == 1
        attrs = lake.sql(
            "SELECT trajectory_id, attrs FROM trajectories WHERE task_id = ? AND generation = 1",
            [task["task_id"]],
        ).rows()
        best = {tid: json.loads(a)["best_of_n"] for tid, a in attrs}
        selected = [tid for tid, b in best.items() if b["selected"]]
        assert [picked[0]["trajectory_id"]] == selected
        for c in payload["candidates"]:
            if c["generation"] == 1:
                assert c["score"] == pytest.approx(best[c["trajectory_id"]]["score"])


def test_meta_and_lake_page_of_the_demo(demo: tuple[tl.Lake, ViewData]) -> None:
    _, data = demo
    meta = data.answer("meta", {})
    assert {"gen-0", "gen-1"} <= {r["ref"] for r in meta["refs"] if r["kind"] == "tag"}
    assert meta["credit_runs"] and meta["score_models"]
    page = data.answer("lake", {})
    assert page["models"] and page["exports"]
    assert {"generation", "model", "export"} <= {n["kind"] for n in page["lineage"]["nodes"]}
    run = meta["credit_runs"][0]["run_name"]
    trajectory = data.answer("runs", {"tag": "gen-0", "limit": "1"})["rows"][0]["trajectory_id"]
    credit = data.answer("credit", {"id": trajectory, "run": run})
    assert credit["turns"] and credit["run_name"] == run
