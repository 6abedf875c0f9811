"""`trajlake view --bundle`: the files of the contract, payloads identical to the server's JSON,
the page copied with its data script in place of the placeholder."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import trajlake as tl
from tests.view.test_view_server import _request
from trajlake.cli.main import cli
from trajlake.credit import run_credit
from trajlake.view import STATIC_DIR, ViewData, view_in_background, write_bundle
from trajlake.view._bundle import DATA_SCRIPT, PLACEHOLDER

WHERE = "task_id IN ('django__django-1000', 'sympy__sympy-1001')"


def _load(path: Path, call: str) -> tuple[Any, ...]:
    """The arguments of the one registering call a bundle script makes."""
    text = path.read_text(encoding="utf-8")
    match = re.fullmatch(rf"{re.escape(call)}\((.*)\);\n", text, re.S)
    assert match, text[:200]
    return tuple(json.loads(f"[{match.group(1)}]"))


def _bundle(path: Path) -> dict[str, Any]:
    text = (path / "data" / "bundle.js").read_text(encoding="utf-8")
    prefix = "window.TRAJLAKE_BUNDLE = "
    assert text.startswith(prefix) and text.endswith(";\n")
    value: dict[str, Any] = json.loads(text[len(prefix) : -2])
    return value


@pytest.fixture
def static(tmp_path: Path) -> Path:
    """The package's page when it is there, else a minimal one with the placeholder."""
    if (STATIC_DIR / "index.html").is_file():
        return STATIC_DIR
    folder = tmp_path / "static"
    folder.mkdir()
    (folder / "index.html").write_text(
        f'<html>\n{PLACEHOLDER}\n<script src="static/app.js"></script>\n'
    )
    (folder / "app.js").write_text("// page\n")
    return folder


def test_bundle_payloads_equal_the_server_responses(
    sample_lake: tl.Lake, tmp_path: Path, static: Path
) -> None:
    run_credit(sample_lake, estimator="outcome", name="outcome-rise", where=WHERE)
    out = tmp_path / "bundle"
    report = write_bundle(sample_lake, out, where=WHERE, static_dir=static)
    assert report.trajectories == 8 and report.credit_files == 8 and report.candidate_files == 2
    bundle = _bundle(out)
    assert {r["trajectory_id"] for r in bundle["runs"]} == {
        r[0]
        for r in sample_lake.sql(f"SELECT trajectory_id FROM trajectories WHERE {WHERE}").rows()
    }
    assert bundle["meta"]["mode"] == "bundle"
    assert sorted(bundle["files"]) == report.keys
    at = str(report.snapshot)
    with view_in_background(sample_lake, static_dir=static) as url:
        for key, relative in bundle["files"].items():
            loaded_key, payload = _load(out / relative, "window.trajlakeBundleLoad")
            assert loaded_key == key
            kind, _, rest = key.partition(":")
            if kind == "trajectory":
                query = {"id": rest}
            elif kind == "credit":
                run, _, trajectory_id = rest.partition(":")
                query = {"run": run, "id": trajectory_id}
            else:
                assert kind == "candidates"
                query = {"task_id": rest}
            endpoint = {"credit": "credit", "trajectory": "trajectory"}.get(kind, "candidates")
            path = f"/api/{endpoint}?" + urllib.parse.urlencode({"at": at, **query})
            status, _, body = _request(url, path)
            assert status == 200 and json.loads(body) == payload, key
        status, _, body = _request(url, f"/api/meta?at={at}")
        assert json.loads(body) | {"mode": "bundle"} == bundle["meta"]
        status, _, body = _request(url, f"/api/lake?at={at}")
        assert json.loads(body) == bundle["lake"]
        query = urllib.parse.urlencode({"at": at, "where": WHERE, "limit": "500"})
        status, _, body = _request(url, f"/api/runs?{query}")
        assert json.loads(body)["rows"] == bundle["runs"]  # the same rows in the same order
        status, _, body = _request(url, f"/api/tasks?{query}")
        assert json.loads(body)["rows"] == bundle["tasks"]


def test_bundle_copies_the_page_with_its_data_script(
    sample_lake: tl.Lake, tmp_path: Path, static: Path
) -> None:
    out = tmp_path / "bundle"
    write_bundle(sample_lake, out, limit=3, static_dir=static)
    index = (static / "index.html").read_text(encoding="utf-8")
    assert PLACEHOLDER in index
    written = (out / "index.html").read_text(encoding="utf-8")
    assert written == index.replace(PLACEHOLDER, DATA_SCRIPT, 1)
    for source in static.rglob("*"):
        if source.is_file() and source.name != "index.html":
            assert (out / "static" / source.relative_to(static)).read_bytes() == source.read_bytes()
    bundle = _bundle(out)
    assert len(bundle["runs"]) == 3 and bundle["selection"]["truncated"] is True
    # Newest first, as the runs page's default order.
    newest = sample_lake.sql(
        "SELECT trajectory_id FROM trajectories "
        "ORDER BY started_at DESC, trajectory_id DESC LIMIT 3"
    ).rows()
    assert [r["trajectory_id"] for r in bundle["runs"]] == [r[0] for r in newest]


def test_bundle_rows_equal_the_runs_rows(
    sample_lake: tl.Lake, tmp_path: Path, static: Path
) -> None:
    write_bundle(sample_lake, tmp_path / "b", limit=6, static_dir=static)
    data = ViewData(sample_lake)
    try:
        page = data.answer("runs", {"limit": "6"})
    finally:
        data.close()
    assert _bundle(tmp_path / "b")["runs"] == page["rows"]


def test_cli_bundle_and_a_bad_where(sample_lake: tl.Lake, tmp_path: Path) -> None:
    if not (STATIC_DIR / "index.html").is_file():
        pytest.skip("the page is not in the static folder")
    out = tmp_path / "cli-bundle"
    args = ["view", "--lake", sample_lake.uri, "--bundle", str(out), "--where", WHERE]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "wrote 8 trajectories" in result.output and (out / "data" / "bundle.js").is_file()
    bad = CliRunner().invoke(cli, [*args[:5], "--where", "nope("])
    assert bad.exit_code == 1 and "where:" in bad.output
