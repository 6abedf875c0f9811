"""`trajlake publish` through the CLI: dry runs on the synthetic lake, a corpus lake and the
demo lake (every config loads with `datasets`), the upload to the fake Hub through env
HF_ENDPOINT / HF_TOKEN, and the refusals (usage errors exit 2, user errors 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import trajlake as tl
from tests.conftest import SHARED_CORPUS
from tests.publish._fake_hub import FakeHub
from tests.publish.conftest import SynthLake
from trajlake.cli.main import cli

datasets = pytest.importorskip("datasets")

TAU = SHARED_CORPUS / "06_eval_frameworks" / "tau_bench"
SWE = SHARED_CORPUS / "01_sweagent_traj"


def _run(*args: str, code: int = 0, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(cli, list(args), env=env)
    assert result.exit_code == code, result.output
    return result


def _check_loads(folder: Path, lake: tl.Lake, cache: Path, at: str | None = None) -> dict[str, Any]:
    """Every config of a dry-run folder loads with the lake's row count (at `at`); the manifest."""
    manifest: dict[str, Any] = json.loads((folder / "manifest.json").read_text())
    assert manifest["tables"]
    for table, entry in manifest["tables"].items():
        loaded = datasets.load_dataset(str(folder), table, split="train", cache_dir=str(cache))
        expected = lake.sql(f"SELECT count(*) AS n FROM {table}", at=at).to_dicts()[0]["n"]
        assert loaded.num_rows == entry["rows"] == expected, table
    return manifest


def test_dry_run_prints_what_it_wrote(synth: SynthLake, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    where = f"task_id = '{synth.tasks[1]}'"
    args = ["publish", "me/ds", "--lake", synth.lake.uri, "--dry-run", str(out), "-o", "json"]
    result = _run(
        *args, "--where", where, "--tables", "trajectories,messages", "--tables", "labels"
    )
    report = json.loads(result.stdout)
    assert report["dry_run"] is True and report["upload"] is None
    assert list(report["folder"]["configs"]) == ["trajectories", "messages", "labels"]
    assert report["folder"]["configs"]["trajectories"] == {"rows": 4, "files": 1}
    assert sorted(report["folder"]["files"]) == sorted(
        p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()
    )
    text = _run("publish", "me/ds", "--lake", synth.lake.uri, "--dry-run", str(out)).output
    assert text.startswith("dry run: wrote snapshot") and "nothing uploaded" in text


def test_refusals(synth: SynthLake, tmp_path: Path, hf_home: Path) -> None:
    out = str(tmp_path / "ds")
    result = _run(
        "publish", "me/ds", "--lake", synth.lake.uri, "--public", "--dry-run", out, code=2
    )
    assert "a public dataset needs a licence" in result.output
    result = _run("publish", "me/ds", "--dry-run", out, code=2)
    assert "--lake (or env TRAJLAKE_LAKE) is required, unless --from-export" in result.output
    result = _run(
        "publish",
        "me/ds",
        "--lake",
        synth.lake.uri,
        "--tables",
        "models",
        "--where",
        "resolved",
        "--dry-run",
        out,
        code=2,
    )
    assert "models has no trajectory_id" in result.output
    with FakeHub() as hub:
        result = _run(
            "publish", "me/ds", "--lake", synth.lake.uri, code=1, env={"HF_ENDPOINT": hub.url}
        )
        assert "error: no Hugging Face token" in result.output and hub.calls == []
    assert not Path(out).exists()


@pytest.mark.filterwarnings(
    "ignore:Use 'content=<...>' to upload raw bytes/text content.:DeprecationWarning"
)
def test_upload_through_the_environment(synth: SynthLake, hf_home: Path) -> None:
    with FakeHub() as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": "hf_cli"}
        result = _run("publish", "me/ds", "--lake", synth.lake.uri, "-o", "json", env=env)
        assert result.stderr == ""  # no upload bars off a terminal
        report = json.loads(result.stdout)
        assert report["upload"]["private"] is True and hub.repos["me/ds"].private
        assert set(hub.repos["me/ds"].files) == {".gitattributes", *report["folder"]["files"]}
        result = _run(
            "publish",
            "me/open",
            "--lake",
            synth.lake.uri,
            "--public",
            "--license",
            "cc-by-4.0",
            "--token",
            "hf_flag",
            env={"HF_ENDPOINT": hub.url},
        )
        assert result.output.startswith("published snapshot") and "(public)" in result.output
        assert not hub.repos["me/open"].private
        [create] = hub.calls_to("/api/repos/create")[1:]
        assert create.headers["authorization"] == "Bearer hf_flag"
        readme = hub.repos["me/open"].files["README.md"].decode()
        assert "license: cc-by-4.0" in readme


def test_dry_run_on_a_corpus_lake(tmp_path: Path) -> None:
    if not (TAU.exists() and SWE.exists()):
        pytest.skip("no shared corpus")
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.ingest([str(TAU), str(SWE)], workers=1)
    out = tmp_path / "ds"
    _run("publish", "me/corpus", "--lake", lake.uri, "--dry-run", str(out))
    manifest = _check_loads(out, lake, tmp_path / "cache")
    formats = {s["source_format"] for s in manifest["provenance"]["sources"]}
    assert len(formats) == 2
    hub = pytest.importorskip("huggingface_hub")
    assert hub.DatasetCard.load(out / "README.md").data.configs[0]["config_name"] == "trajectories"


@pytest.mark.long  # the quick demo loop, then a publish: ≈ 21 s on 2 cores
def test_dry_run_on_the_demo_lake(tmp_path: Path) -> None:
    lake_dir = tmp_path / "demo"
    _run("demo", "--lake", str(lake_dir), "--quick")
    out = tmp_path / "ds"
    # At the gen-1 tag: the head is the untagged snapshot of the reranker's stored scores.
    _run("publish", "me/demo", "--lake", str(lake_dir), "--at", "gen-1", "--dry-run", str(out))
    manifest = _check_loads(out, tl.open_lake(lake_dir), tmp_path / "cache", at="gen-1")
    assert {"trajectories", "messages", "credits"} <= set(manifest["tables"])
    assert manifest["snapshot"]["tags"] == ["gen-1"]
