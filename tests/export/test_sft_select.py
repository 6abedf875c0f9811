"""SFT selection: weights from a credit run, dedupe by content hash, splits by task."""

from __future__ import annotations

import pytest

import trajlake as tl
from trajlake.credit import run_credit
from trajlake.errors import TrajlakeError
from trajlake.export._sft_select import (
    MaskRuleMismatch,
    NoSuchCreditRun,
    check_mask_rule,
    select_conversations,
    split_of,
)
from trajlake.sample import sample_trajectories, sample_trajectory


@pytest.fixture
def credited(lake: tl.Lake) -> tl.Lake:
    lake.write(list(sample_trajectories(12)))
    run_credit(lake, estimator="prefix-mc", mask="rise", name="r")
    return lake


def test_without_credit_every_assistant_turn_weighs_one(sample_lake: tl.Lake) -> None:
    convs = list(select_conversations(sample_lake))
    assert [c.trajectory_id for c in convs] == sorted(c.trajectory_id for c in convs)
    assert len(convs) == 40
    for conv in convs:
        assert conv.messages and conv.messages[0]["role"] == "system"
        for m, w in zip(conv.messages, conv.weights, strict=True):
            assert (w == 1.0) if m["role"] == "assistant" else (w is None)
            assert "idx" not in m and "thread" not in m
        assert conv.tools


def test_weights_equal_the_credit_rows(credited: tl.Lake) -> None:
    expected = {
        (r["trajectory_id"], r["turn"]): r["w"]
        for r in credited.sql(
            "SELECT trajectory_id, turn, CASE WHEN mask THEN weight ELSE 0 END AS w "
            "FROM credits WHERE run_name = 'r' AND thread = 'main'"
        ).to_dicts()
    }
    got = {
        (c.trajectory_id, turn): w
        for c in select_conversations(credited, credit="r")
        for w, turn in zip(c.weights, c.turns, strict=True)
        if w is not None
    }
    assert got == expected
    assert 0 < sum(1 for w in got.values() if w > 0) < len(got)


def test_min_weight_zeroes_lighter_turns(credited: tl.Lake) -> None:
    weights = [
        w
        for c in select_conversations(credited, credit="r", min_weight=2.0)
        for w in c.weights
        if w is not None
    ]
    assert weights and all(w == 0.0 for w in weights)


def test_unknown_credit_run_names_the_available_ones(credited: tl.Lake) -> None:
    with pytest.raises(NoSuchCreditRun, match="available: r"):
        list(select_conversations(credited, credit="nope"))


def test_mask_rule_must_match_the_run(credited: tl.Lake) -> None:
    assert check_mask_rule(credited, "r", None, at=None) == "rise"
    assert check_mask_rule(credited, "r", "rise", at=None) == "rise"
    assert check_mask_rule(credited, None, None, at=None) == "all"
    with pytest.raises(MaskRuleMismatch, match="'rise', not 'all'"):
        check_mask_rule(credited, "r", "all", at=None)
    with pytest.raises(ValueError, match="needs --credit"):
        check_mask_rule(credited, None, "rise", at=None)
    assert issubclass(MaskRuleMismatch, TrajlakeError)


def test_dedupe_by_content_hash_keeps_the_first_id(lake: tl.Lake) -> None:
    original = sample_trajectory(0)
    copy = {**original, "trajectory_id": "zzz-copy", "content_hash": None}
    lake.write([original, copy])
    hashes = lake.sql("SELECT DISTINCT content_hash FROM trajectories").rows()
    assert len(hashes) == 1 and hashes[0][0]
    assert [c.trajectory_id for c in select_conversations(lake)] == [original["trajectory_id"]]
    assert len(list(select_conversations(lake, dedupe=False))) == 2


def test_where_and_at_select(sample_lake: tl.Lake) -> None:
    snap = sample_lake.snapshot().snapshot_id
    sample_lake.write(list(sample_trajectories(4, start=100)))
    assert len(list(select_conversations(sample_lake, at=snap))) == 40
    resolved = list(select_conversations(sample_lake, where="resolved"))
    assert resolved and all(c.resolved for c in resolved)


def test_split_by_task_is_deterministic_and_seeded() -> None:
    tasks = [f"task-{i}" for i in range(400)]
    first = [split_of(t, 0, 0.25) for t in tasks]
    assert first == [split_of(t, 0, 0.25) for t in tasks]
    assert 60 < first.count("val") < 140
    assert first != [split_of(t, 1, 0.25) for t in tasks]
    assert all(split_of(t, 0, 0.0) == "train" for t in tasks)
    with pytest.raises(ValueError):
        split_of("t", 0, 1.0)
