"""Value-model examples: outcomes at a pinned snapshot, task splits, balancing."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import trajlake as tl
from trajlake.synth import SynthConfig, generate
from trajlake.value.dataset import ValueExample, balance, load_examples, split_by_task


@pytest.fixture(scope="module")
def synth_lake(tmp_path_factory: pytest.TempPathFactory) -> tl.Lake:
    lake = tl.open_lake(Path(tmp_path_factory.mktemp("synth")) / "lake", create=True)
    lake.write(generate(SynthConfig(seed=3, n_tasks=40, rollouts_per_task=8)).trajectories)
    return lake


def test_load_examples_reads_outcomes(synth_lake: tl.Lake) -> None:
    examples = load_examples(synth_lake)
    assert len(examples) == 320
    assert [e.trajectory_id for e in examples] == sorted(e.trajectory_id for e in examples)
    resolved = synth_lake.sql("SELECT count(*) FROM outcomes WHERE resolved").rows()[0][0]
    assert sum(e.label for e in examples) == resolved
    assert len({e.task_id for e in examples}) == 40
    assert {e.snapshot_id for e in examples} == {synth_lake.snapshot().snapshot_id}


def test_load_examples_where_filters(synth_lake: tl.Lake) -> None:
    examples = load_examples(synth_lake, where="t.task_id = 'synth-repo-0001'")
    assert len(examples) == 8
    assert {e.task_id for e in examples} == {"synth-repo-0001"}


def test_load_examples_skips_unknown_and_uses_reward(lake: tl.Lake) -> None:
    base = {"messages": [{"role": "user", "content": "fix it"}], "task_id": "t"}
    lake.write(
        [
            {**base, "trajectory_id": "a", "resolved": True},
            {**base, "trajectory_id": "b", "reward": 0.5},
            {**base, "trajectory_id": "c", "reward": 0.0},
            {**base, "trajectory_id": "d"},
        ]
    )
    labels = {e.trajectory_id: e.label for e in load_examples(lake)}
    assert labels == {"a": 1, "b": 1, "c": 0}


def test_load_examples_pins_snapshot(lake: tl.Lake) -> None:
    base = {"messages": [{"role": "user", "content": "fix it"}], "task_id": "t", "resolved": False}
    lake.write([{**base, "trajectory_id": "a"}])
    first = lake.snapshot().snapshot_id
    lake.write([{**base, "trajectory_id": "b"}])
    assert [e.trajectory_id for e in load_examples(lake, at=first)] == ["a"]
    assert len(load_examples(lake)) == 2
    with pytest.raises(ValueError, match="label"):
        load_examples(lake, label="resolved")  # type: ignore[arg-type]


def _examples(n_tasks: int, per_task: int, positives_per_task: int) -> list[ValueExample]:
    return [
        ValueExample(
            f"t{t}-{i}", f"t{t}", int(i < positives_per_task), None, None, None, None, None, 1
        )
        for t in range(n_tasks)
        for i in range(per_task)
    ]


def test_split_by_task_disjoint_and_deterministic() -> None:
    examples = _examples(200, 3, 1)
    splits = split_by_task(examples, val_frac=0.1, test_frac=0.2, seed=7)
    tasks = {name: {e.task_id for e in split} for name, split in splits.items()}
    assert not tasks["train"] & tasks["val"]
    assert not tasks["train"] & tasks["test"]
    assert not tasks["val"] & tasks["test"]
    assert sum(len(s) for s in splits.values()) == len(examples)
    assert 20 <= len(tasks["test"]) <= 60 and 5 <= len(tasks["val"]) <= 40
    assert splits == split_by_task(examples, val_frac=0.1, test_frac=0.2, seed=7)
    # a task keeps its split when other tasks come and go
    fewer = split_by_task(examples[:300], val_frac=0.1, test_frac=0.2, seed=7)
    assert {e.task_id for e in fewer["test"]} <= tasks["test"]
    other = split_by_task(examples, val_frac=0.1, test_frac=0.2, seed=8)
    assert {e.task_id for e in other["test"]} != tasks["test"]
    with pytest.raises(ValueError):
        split_by_task(examples, val_frac=0.6, test_frac=0.5)


def test_balance_respects_ratio_per_split() -> None:
    examples = _examples(50, 8, 1)  # 50 positives, 350 negatives
    balanced = balance(examples, ratio=2.0, seed=0)
    counts = Counter(e.label for e in balanced)
    assert counts == {1: 50, 0: 100}
    assert balanced == balance(examples, ratio=2.0, seed=0)
    assert [e for e in examples if e in set(balanced)] == balanced  # order kept
    splits = split_by_task(examples, val_frac=0.2, test_frac=0.2, seed=0)
    for name, split in balance(splits, ratio=1.5, seed=1).items():
        positives = sum(e.label for e in splits[name])
        kept = Counter(e.label for e in split)
        assert kept[1] == positives and kept[0] <= 1.5 * positives
    assert balance(examples, ratio=100.0) == examples


def test_load_examples_from_one_label_source(lake: tl.Lake, tmp_path: Path) -> None:
    """`labels:<source>` keeps only that verifier's judgements (no rollout's own result)."""
    base = {"messages": [{"role": "user", "content": "fix it"}], "task_id": "t"}
    lake.write([{**base, "trajectory_id": i, "resolved": True} for i in ("a", "b", "c", "d")])
    rows = [
        {"trajectory_id": "a", "resolved": False, "source": "human"},
        {"trajectory_id": "b", "resolved": True, "source": "human"},
        {"trajectory_id": "c", "resolved": False, "source": "judge"},
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lake.label(path)
    sources = {r[0] for r in lake.sql("SELECT DISTINCT source FROM labels").rows()}
    human = next(s for s in sources if "human" in s)
    judge = next(s for s in sources if "judge" in s)
    assert {e.trajectory_id: e.label for e in load_examples(lake)} == {
        "a": 0,
        "b": 1,
        "c": 0,
        "d": 1,
    }
    by_human = load_examples(lake, label=f"labels:{human}")
    assert {e.trajectory_id: e.label for e in by_human} == {"a": 0, "b": 1}
    assert {e.outcome_source for e in by_human} == {f"label:{human}"}
    assert [e.trajectory_id for e in load_examples(lake, label=f"labels:{judge}")] == ["c"]
    with pytest.raises(ValueError, match="labels:<source>"):
        load_examples(lake, label="judge")
