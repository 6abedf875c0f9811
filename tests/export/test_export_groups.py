"""RL groups export: BAR selection on hand-made reward sets, hand-computed advantages, the
export on synthetic, Orchard and corpus lakes (checked against independent SQL), determinism
and the CLI."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import trajlake as tl
from tests.conftest import SHARED_CORPUS
from trajlake.cli.main import cli
from trajlake.errors import OutputInsideLake
from trajlake.export._bar import (
    BarOptions,
    Candidate,
    grpo_advantages,
    rloo_advantages,
    select_group,
    success_bounds,
    try_assemble,
)
from trajlake.export.groups import export_groups, reward_of
from trajlake.synth import SynthConfig, generate

ORCHARD = Path(__file__).resolve().parents[1] / "data" / "orchard_rl" / "dump"
TAU = SHARED_CORPUS / "06_eval_frameworks" / "tau_bench"


def _cands(rewards: list[float], statuses: list[str] | None = None) -> list[Candidate]:
    statuses = statuses or ["completed"] * len(rewards)
    return [
        Candidate(f"t{i:02d}", r, s, float(100 + i), i)
        for i, (r, s) in enumerate(zip(rewards, statuses, strict=True))
    ]


def _rows(folder: Path, split: str = "train") -> list[dict[str, Any]]:
    return [
        row
        for shard in sorted(folder.glob(f"{split}-*.parquet"))
        for row in pq.read_table(shard).to_pylist()
    ]


# -- BAR ----------------------------------------------------------------------------------


def test_success_bounds_are_the_band_nearest_the_target_first() -> None:
    assert success_bounds(8, 0.375, 0.625, 0.5) == [4, 3, 5]
    assert success_bounds(4, 0.375, 0.625, 0.5) == [2]  # ceil(1.5) .. floor(2.5)
    assert success_bounds(7, 0.375, 0.625, 0.5) == [4, 3]  # round(3.5) = 4, band 3..4
    assert success_bounds(8, 0.0, 1.0, 0.5) == [4, 3, 5, 2, 6, 1, 7, 0, 8]


def test_exactly_n_balanced_rollouts_make_the_group_in_consideration_order() -> None:
    cands = _cands([1, -1, 1, -1, 1, -1, 1, -1])
    choice = select_group(cands, BarOptions())
    assert choice.dropped is None and not choice.relaxed
    assert [c.trajectory_id for c in choice.members] == [c.trajectory_id for c in cands]


def test_all_pass_is_dropped_unless_relaxed() -> None:
    cands = _cands([1.0] * 8)
    assert select_group(cands, BarOptions()).dropped == "all_success"
    relaxed = select_group(cands, BarOptions(relaxed=True))
    assert relaxed.dropped is None and relaxed.relaxed and len(relaxed.members) == 8


def test_drop_reasons_name_why_no_group_fits() -> None:
    assert select_group(_cands([1, -1] * 3 + [1]), BarOptions()).dropped == "too_few_rollouts"
    assert select_group(_cands([-1.0] * 12), BarOptions()).dropped == "all_failure"
    # 2 successes of 16: the band needs at least 3 of 8
    assert select_group(_cands([1, 1] + [-1] * 14), BarOptions()).dropped == "out_of_band"
    # relaxed cannot conjure rollouts that are not there
    assert select_group(_cands([1.0] * 5), BarOptions(relaxed=True)).dropped == "too_few_rollouts"


def test_the_target_count_and_the_preferred_rollouts_are_taken() -> None:
    # 6 successes, 10 failures: n+ = 4 (the target), the 4 shortest of each class
    rewards = [1, -1] * 6 + [-1] * 4
    group = try_assemble(_cands(rewards), 8, 0.375, 0.625, 0.5)
    assert group is not None
    assert sum(c.success for c in group) == 4
    assert [c.order for c in group if c.success] == [0, 2, 4, 6]
    assert [c.order for c in group if not c.success] == [1, 3, 5, 7]
    # only 3 failures: the band's n+ = 5 is the one that can be filled
    group = try_assemble(_cands([1] * 7 + [-1] * 3), 8, 0.375, 0.625, 0.5)
    assert group is not None and sum(c.success for c in group) == 5


def test_status_ranks_before_length_and_aborted_rollouts_only_backfill() -> None:
    statuses = ["truncated", "completed", "completed", "timeout", "completed", "error"]
    cands = [
        Candidate("long-truncated", 1, statuses[0], 10.0, 0),
        Candidate("long-completed", 1, statuses[1], 500.0, 1),
        Candidate("short-completed", 1, statuses[2], 20.0, 2),
        Candidate("aborted-pass", 1, statuses[3], 1.0, 3),
        Candidate("fail", -1, statuses[4], 50.0, 4),
        Candidate("aborted-fail", -1, statuses[5], 5.0, 5),
    ]
    group = try_assemble(cands, 4, 0.5, 0.5, 0.5)
    assert group is not None
    assert [c.trajectory_id for c in group] == [
        "short-completed",
        "long-completed",
        "fail",
        "aborted-fail",
    ]
    options = BarOptions(size=4, max_rollouts=6, rho_min=0.5, rho_max=0.5)
    assert select_group(cands, options).dropped is None
    no_backfill = BarOptions(
        size=4, max_rollouts=6, rho_min=0.5, rho_max=0.5, backfill_aborted=False
    )
    assert select_group(cands, no_backfill).dropped == "out_of_band"  # one usable failure left


def test_only_the_first_max_rollouts_are_considered() -> None:
    cands = _cands([-1.0] * 16 + [1.0] * 4)
    assert select_group(cands, BarOptions()).dropped == "all_failure"
    assert select_group(cands, BarOptions(max_rollouts=20)).dropped is None


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="max_rollouts"):
        BarOptions(size=8, max_rollouts=4)
    with pytest.raises(ValueError, match="rho_min <= rho_max"):
        BarOptions(rho_min=0.7, rho_max=0.6)


# -- advantages and rewards --------------------------------------------------------------


def test_advantages_match_hand_computation() -> None:
    a = grpo_advantages([1, 1, -1, -1])  # mean 0, population std 1
    assert a == pytest.approx([1 / 1.0001, 1 / 1.0001, -1 / 1.0001, -1 / 1.0001])
    assert rloo_advantages([1, 1, -1, -1]) == pytest.approx([4 / 3, 4 / 3, -4 / 3, -4 / 3])
    pop = math.sqrt(2 / 9)  # rewards 1, 0, 0: mean 1/3
    assert grpo_advantages([1, 0, 0], eps=0.0) == pytest.approx(
        [(2 / 3) / pop, -(1 / 3) / pop, -(1 / 3) / pop]
    )
    sample = math.sqrt(1 / 3)
    assert grpo_advantages([1, 0, 0], eps=0.0, ddof=1)[0] == pytest.approx((2 / 3) / sample)
    assert rloo_advantages([1, 0, 0]) == pytest.approx([1.0, -0.5, -0.5])
    assert grpo_advantages([1, 1, 1]) == [0.0, 0.0, 0.0]
    assert rloo_advantages([3.0]) == [0.0]


def test_reward_mappings() -> None:
    assert [reward_of(True, None, m) for m in ("signed", "binary")] == [1.0, 1.0]
    assert [reward_of(False, 0.7, m) for m in ("signed", "binary", "scalar")] == [-1.0, 0.0, 0.7]
    assert reward_of(None, 0.2, "signed") == 1.0  # no verdict: the sign of the reward
    assert reward_of(None, 0.0, "binary") == 0.0
    assert reward_of(True, None, "scalar") is None
    assert reward_of(None, None, "signed") is None


# -- export -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synth_lake(tmp_path_factory: pytest.TempPathFactory) -> tl.Lake:
    root = tmp_path_factory.mktemp("groups")
    lake = tl.open_lake(root / "lake", create=True)
    lake.write(generate(SynthConfig(seed=3, n_tasks=16, rollouts_per_task=10)).trajectories)
    return lake


def _successes_by_task(lake: tl.Lake) -> dict[str, tuple[int, int]]:
    rows = lake.sql(
        "SELECT task_id, count(*) FILTER (WHERE resolved) AS pos, "
        "count(*) FILTER (WHERE NOT resolved) AS neg FROM outcomes GROUP BY task_id"
    ).rows()
    return {task: (int(pos), int(neg)) for task, pos, neg in rows}


def test_export_keeps_exactly_the_tasks_with_a_balanced_group(
    synth_lake: tl.Lake, tmp_path: Path
) -> None:
    report = synth_lake.export_groups(str(tmp_path / "out"))
    rows = _rows(tmp_path / "out")
    counts = _successes_by_task(synth_lake)
    # Independently: a group of 8 with 3–5 successes exists iff max(3, 8 − neg) <= min(5, pos).
    expected = sorted(t for t, (pos, neg) in counts.items() if max(3, 8 - neg) <= min(5, pos))
    assert sorted({r["group_id"] for r in rows}) == expected
    assert 0 < len(expected) < len(counts)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    c = manifest["counts"]
    assert c["tasks"] == len(counts) and c["groups_kept"] == len(expected)
    assert c["groups_kept"] + sum(c["dropped"].values()) == c["tasks"]
    assert c["rollouts_kept"] == len(rows) == 8 * len(expected)
    assert report.counts.groups_kept == len(expected)
    outcome = {
        tid: bool(res)
        for tid, res in synth_lake.sql("SELECT trajectory_id, resolved FROM outcomes").rows()
    }
    for group in expected:
        members = [r for r in rows if r["group_id"] == group]
        assert [r["position"] for r in members] == list(range(8))
        assert 3 <= sum(r["success"] for r in members) <= 5
        rewards = [r["reward"] for r in members]
        assert rewards == [1.0 if outcome[r["trajectory_id"]] else -1.0 for r in members]
        assert [r["advantage_grpo"] for r in members] == pytest.approx(grpo_advantages(rewards))
        assert [r["advantage_rloo"] for r in members] == pytest.approx(rloo_advantages(rewards))
        assert sum(r["advantage_rloo"] for r in members) == pytest.approx(0.0)


def test_rows_carry_the_conversation_and_the_manifest_the_shard_hashes(
    synth_lake: tl.Lake, tmp_path: Path
) -> None:
    export_groups(synth_lake, str(tmp_path / "out"), val_frac=0.3, seed=1)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert set(manifest["splits"]) == {"train", "val"}
    train, val = _rows(tmp_path / "out"), _rows(tmp_path / "out", "val")
    assert not {r["task_id"] for r in train} & {r["task_id"] for r in val}  # split by task
    for split in manifest["splits"].values():
        for f in split["files"]:
            data = (tmp_path / "out" / f["path"]).read_bytes()
            assert f["sha256"] == hashlib.sha256(data).hexdigest() and f["bytes"] == len(data)
    row = train[0]
    stored = synth_lake.trajectory(row["trajectory_id"])
    messages = json.loads(row["messages"])
    assert [m["role"] for m in messages] == [m.role for m in stored.messages if m.thread == "main"]
    assert row["n_turns"] == stored.n_turns and row["final_output"] == stored.final_output
    assert row["token_ids"] is None  # the synthetic rollouts carry no token ids
    exports = synth_lake.sql("SELECT format, source_snapshot FROM exports").rows()
    assert ("groups", manifest["snapshot"]["id"]) in exports


def test_two_exports_are_byte_identical(synth_lake: tl.Lake, tmp_path: Path) -> None:
    for name in ("a", "b"):
        export_groups(synth_lake, str(tmp_path / name), relaxed=True, size=4, max_rollouts=8)
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert "manifest.json" in files and "train-00000.parquet" in files
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_relaxed_and_where_change_what_is_kept(synth_lake: tl.Lake, tmp_path: Path) -> None:
    strict = export_groups(synth_lake, str(tmp_path / "strict"))
    relaxed = export_groups(synth_lake, str(tmp_path / "relaxed"), relaxed=True)
    assert relaxed.counts.groups_kept == strict.counts.tasks  # every task has 10 >= 8 rollouts
    assert relaxed.counts.groups_relaxed == relaxed.counts.groups_kept - strict.counts.groups_kept
    some = export_groups(synth_lake, str(tmp_path / "some"), where="task_id < 'synth-repo-0004'")
    assert some.counts.tasks == 4 and some.counts.rollouts_read == 40


def test_rollouts_without_outcome_or_task_are_counted(tmp_path: Path) -> None:
    lake = tl.open_lake(tmp_path / "lake", create=True)
    records = generate(SynthConfig(seed=1, n_tasks=2, rollouts_per_task=8)).trajectories
    records[0] = {**records[0], "resolved": None, "reward": None}
    records[1] = {**records[1], "task_id": None}
    lake.write(records)
    report = export_groups(lake, str(tmp_path / "out"), relaxed=True)
    assert report.counts.rollouts_without_outcome == 1
    assert report.counts.rollouts_without_key == 1
    assert report.counts.dropped["too_few_rollouts"] == 1  # the task left with 6 rollouts


def test_output_inside_the_lake_is_refused(synth_lake: tl.Lake) -> None:
    with pytest.raises(OutputInsideLake):
        export_groups(synth_lake, str(Path(synth_lake.uri) / "groups"))


def test_orchard_token_ids_reach_the_rows(tmp_path: Path) -> None:
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.ingest(str(ORCHARD), workers=1)
    export_groups(lake, str(tmp_path / "out"), size=4, max_rollouts=4, rho_min=0.5, rho_max=0.5)
    rows = _rows(tmp_path / "out")
    assert len(rows) == 4 and sum(r["success"] for r in rows) == 2
    docs = [json.loads(p.read_text()) for p in sorted(ORCHARD.glob("rollout_*.json"))]
    for row in rows:
        match = [
            d for d in docs if d["prompt_token_ids"] + d["response_token_ids"] == row["token_ids"]
        ]
        assert len(match) == 1, row["trajectory_id"]
        doc = match[0]
        assert row["loss_mask"] == [0] * len(doc["prompt_token_ids"]) + doc["loss_mask"]
        assert row["final_output"] == doc["model_patch"]


# -- CLI ----------------------------------------------------------------------------------


def test_cli_exports_groups_as_json(synth_lake: tl.Lake, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    args = [
        "export",
        "groups",
        str(out),
        "--lake",
        synth_lake.uri,
        "--size",
        "4",
        "--max-rollouts",
        "8",
    ]
    result = CliRunner().invoke(cli, [*args, "--reward", "binary", "--output", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    rows = _rows(out)
    assert report["counts"]["rollouts_kept"] == len(rows) > 0
    assert {r["reward"] for r in rows} == {0.0, 1.0}
    assert all(
        1 <= sum(x["success"] for x in rows if x["group_id"] == r["group_id"]) <= 2 for r in rows
    )
    bad = CliRunner().invoke(cli, [*args[:-2], "--max-rollouts", "2"])
    assert bad.exit_code == 2 and "max_rollouts" in bad.output


def test_cli_on_a_corpus_lake(tmp_path: Path) -> None:
    if not TAU.exists():
        pytest.skip("no shared corpus")
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.ingest(str(TAU), workers=1)
    out = tmp_path / "tau"
    args = ["export", "groups", str(out), "--lake", lake.uri, "--size", "4", "--max-rollouts", "4"]
    result = CliRunner().invoke(cli, [*args, "-o", "json"])
    assert result.exit_code == 0, result.output
    counts = _successes_by_task(lake)
    # 4 trials per task and a band of 2 of 4: exactly the tasks solved twice
    expected = sorted(t for t, (pos, neg) in counts.items() if pos == 2 and neg == 2)
    rows = _rows(out)
    assert sorted({r["task_id"] for r in rows}) == expected and expected
    report = json.loads(result.output)
    assert report["counts"]["dropped"]["all_failure"] == sum(
        1 for p, _ in counts.values() if p == 0
    )
    assert report["counts"]["dropped"]["all_success"] == sum(
        1 for _, n in counts.values() if n == 0
    )


@pytest.mark.long
def test_cli_on_the_demo_lake(tmp_path: Path) -> None:
    lake_dir = tmp_path / "demo"
    demo = CliRunner().invoke(cli, ["demo", "--lake", str(lake_dir), "--quick"])
    assert demo.exit_code == 0, demo.output
    lake = tl.open_lake(lake_dir)
    out = tmp_path / "groups"
    # The quick demo samples 4–6 rollouts per task: groups of 4, 2 successes each.
    args = ["export", "groups", str(out), "--lake", str(lake_dir), "--size", "4", "-o", "json"]
    result = CliRunner().invoke(cli, [*args, "--max-rollouts", "6"])
    assert result.exit_code == 0, result.output
    rows = _rows(out)
    report = json.loads(result.output)
    assert report["counts"]["groups_kept"] == len({r["group_id"] for r in rows}) > 0
    assert all(r["group_successes"] == 2 and r["group_size"] == 4 for r in rows)
    outcome = dict(lake.sql("SELECT trajectory_id, resolved FROM outcomes").rows())
    assert all(r["success"] == bool(outcome[r["trajectory_id"]]) for r in rows)
