"""`export sft --at TAG --credit RUN` with a run computed after the tag: read where it was
committed, checked trajectory by trajectory against what it read."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import trajlake as tl
from trajlake.credit import run_credit
from trajlake.errors import NoSuchCreditRun, SftSelfCheckFailed
from trajlake.export.sft import export_sft
from trajlake.sample import sample_trajectories


def test_a_run_made_after_the_tag_weights_the_tagged_trajectories(
    lake: tl.Lake, tmp_path: Path
) -> None:
    lake.write(list(sample_trajectories(12)))
    tag = lake.tag("gen-0").snapshot_id
    lake.write(list(sample_trajectories(4, start=100)))  # gen-1 rollouts arrive
    run = run_credit(lake, estimator="outcome", mask="all", name="later")
    report = export_sft(lake, str(tmp_path / "sft"), format="trl", at="gen-0", credit="later")
    manifest = json.loads((tmp_path / "sft" / "manifest.json").read_text())
    assert manifest["snapshot"]["id"] == tag and manifest["credit_run"] == "later"
    assert manifest["credit_snapshot"] == report.credit_snapshot == run.snapshot > tag
    assert manifest["credit_input_snapshots"] == [run.source_snapshot]
    lines = (tmp_path / "sft" / "train-00000.jsonl").read_text().splitlines()
    ids = {json.loads(line)["trajectory_id"] for line in lines}
    tagged = {r[0] for r in lake.sql("SELECT trajectory_id FROM trajectories", at="gen-0").rows()}
    assert ids == tagged  # the tag's twelve, not the four written after it
    assert report.splits["train"].trajectories == 12 and not report.splits["train"].dropped


def test_a_run_that_read_other_content_fails_with_the_command_to_fix_it(
    lake: tl.Lake, tmp_path: Path
) -> None:
    trajs = list(sample_trajectories(6))
    lake.write(trajs)
    lake.tag("gen-0")
    grown = copy.deepcopy(trajs[2])  # the session went on after the tag
    grown["messages"] += [
        {"role": "user", "content": "and?"},
        {"role": "assistant", "content": "ok"},
    ]
    lake.write([grown])
    run_credit(lake, estimator="outcome", mask="all", name="later")
    out = tmp_path / "sft"
    with pytest.raises(SftSelfCheckFailed) as failed:
        export_sft(lake, str(out), format="openai", at="gen-0", credit="later")
    message = str(failed.value)
    assert "1 of the exported trajectories have other content than at gen-0" in message
    assert repr(grown["trajectory_id"]) in message
    fix = "trajlake credit --lake LAKE --at gen-0 --estimator outcome"
    assert fix in message and "--mask all" in message and "--name later-gen-0" in message
    assert not out.exists()
    # The fix it names works: a run on the tagged snapshot.
    run_credit(lake, estimator="outcome", mask="all", name="later-gen-0", at="gen-0")
    report = export_sft(lake, str(out), format="openai", at="gen-0", credit="later-gen-0")
    assert report.splits["train"].trajectories == 6


def test_an_unknown_run_names_the_runs_at_the_tag_and_after(lake: tl.Lake, tmp_path: Path) -> None:
    lake.write(list(sample_trajectories(4)))
    lake.tag("gen-0")
    run_credit(lake, estimator="outcome", mask="all", name="later")
    with pytest.raises(NoSuchCreditRun, match="available: later"):
        export_sft(lake, str(tmp_path / "x"), format="trl", at="gen-0", credit="nope")
