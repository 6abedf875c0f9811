"""The CLI against an object store (moto S3): storage options from flags and from the env."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

# tests/ holds the moto helper; it is not a package, so make it importable from here.
_TESTS_DIR = str(Path(__file__).resolve().parents[1])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
from s3_server import DEFAULT_BUCKET, moto_s3_server  # noqa: E402

Run = Callable[..., Result]


@pytest.mark.s3
def test_s3_lake_with_storage_options(jsonl: Path, run: Run, n: int) -> None:
    pytest.importorskip("moto")
    with moto_s3_server() as (_, options):
        lake = f"s3://{DEFAULT_BUCKET}/cli-lake"
        flags = [
            arg for key, value in options.items() for arg in ("--storage-option", f"{key}={value}")
        ]
        run("init", "--lake", lake, *flags)
        report = json.loads(run("ingest", jsonl, "--lake", lake, "-o", "json", *flags).stdout)
        assert (report["added"], report["quarantined"]) == (n, 1)
        env = {"TRAJLAKE_LAKE": lake, "TRAJLAKE_STORAGE_OPTIONS": json.dumps(options)}
        query = "SELECT count(*) AS n FROM trajectories"
        assert json.loads(run("sql", query, "-o", "json", env=env).stdout) == [{"n": n}]
        assert json.loads(run("validate", "-o", "json", env=env).stdout)["ok"] is True
