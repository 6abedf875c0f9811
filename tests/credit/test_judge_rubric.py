"""The rubric judge against the local OpenAI-compatible stub (127.0.0.1 only): the rubric in the
request, key-turn scores aggregated by hand, malformed answers counted, caches kept apart from
the default prompt's, user rubric files and bad ones named."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from _judge_stub import N_JUDGED, credit_cli_args, judge_stub, stub_judge
from click.testing import CliRunner

import trajlake as tl
from tests.credit._corpus import CORPUS, ingest_labelled_corpus
from trajlake.cli.main import cli
from trajlake.credit import TrajectoryTurns, load_turns, run_credit, value_source
from trajlake.credit._judge_prompt import interpolate
from trajlake.credit._judge_rubric import parse_rubric_answer, rubric_from_data
from trajlake.credit.judge import DEFAULT_RUBRIC, JudgeValues, cache_key, load_rubric
from trajlake.errors import TrajlakeError
from trajlake.sample import sample_trajectories

IDS = [c.id for c in DEFAULT_RUBRIC.criteria]


def n_turns(body: dict[str, Any]) -> int:
    match = re.search(r"T = (\d+) turns", body["messages"][-1]["content"])
    assert match
    return int(match.group(1))


def rubric_reply(body: dict[str, Any]) -> str:
    """Point 0: every criterion 0; point T // 2: the first three criteria 1, the rest 0.5."""
    half = n_turns(body) // 2
    late = {c: (1.0 if i < 3 else 0.5) for i, c in enumerate(IDS)}
    return json.dumps(
        {
            "key_turns": [
                {"turn": 0, "scores": dict.fromkeys(IDS, 0.0)},
                {"turn": half, "scores": late},
            ]
        }
    )


def expected(traj: TrajectoryTurns) -> list[float]:
    # The weighted mean at T // 2 with seven equal weights: (3·1 + 4·0.5) / 7 = 5/7.
    n = len(traj.turns)
    points = {0: 0.0, n // 2: 5 / 7} if n // 2 else {0: 5 / 7}
    return interpolate(points, n, float(traj.outcome or 0.0))


def test_request_carries_the_rubric_and_values_are_the_weighted_mean(
    judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns]
) -> None:
    with judge_stub(reply=rubric_reply) as stub:
        rubric_judge = stub_judge(judged_lake, stub.url, prompt="rubric")
        values = rubric_judge.values(judged_turns)
        system, user = (m["content"] for m in stub.requests[0]["messages"])
    assert rubric_judge.name == "judge:rubric"
    for c in DEFAULT_RUBRIC.criteria:
        assert f"- {c.id}: {c.title} (1) — {c.description}" in system
    assert '"key_turns"' in system and '"key_turns"' in user and "=== TRAJECTORY ===" in user
    report = rubric_judge.last_report
    assert not report.fallbacks and report.requests == N_JUDGED
    for traj in judged_turns:
        assert values[traj.trajectory_id] == pytest.approx(expected(traj))
        assert report.scores[traj.trajectory_id][0] == dict.fromkeys(IDS, 0.0)
    versions = judged_lake.sql(
        "SELECT DISTINCT json_extract_string(attrs, '$.prompt_version') FROM calls"
    ).rows()
    assert versions == [(DEFAULT_RUBRIC.version,)]
    assert DEFAULT_RUBRIC.version.startswith("judge-rubric-v1:swe-process:")


def test_parsing_partial_and_malformed_answers() -> None:
    rubric = DEFAULT_RUBRIC
    fenced = (
        "Scores:\n```json\n"
        '{"key_turns": [{"turn": 0, "scores": {"fix": 0.2, "bogus": 1}},'
        ' {"turn": 9, "scores": {"fix": 1}}, {"turn": "2", "scores":'
        ' [{"criterion": "fix", "score": "1.5"}, {"criterion": "verification", "score": 0}]}]}'
        "\n```"
    )
    answer = parse_rubric_answer(fenced, 4, rubric)
    # Unknown criteria and points outside 0..T dropped, strings read, scores clipped.
    assert answer.error is None
    assert answer.scores == {0: {"fix": 0.2}, 2: {"fix": 1.0, "verification": 0.0}}
    # The aggregate leaves out criteria not scored: (1·1 + 1·0) / 2.
    assert rubric.aggregate(answer.scores[2]) == pytest.approx(0.5)
    assert parse_rubric_answer("the agent did well", 4, rubric).error == (
        'no JSON object with a "key_turns" list in the answer'
    )
    bad = (
        '{"key_turns": [{"turn": 1, "scores": {"fix": "high"}}, {"turn": 7, "scores": {"fix": 1}}]}'
    )
    assert parse_rubric_answer(bad, 4, rubric).error == (
        "no key turn in 0..4 with a numeric score of a rubric criterion"
    )


def test_malformed_answers_are_counted_failures_not_crashes(
    judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns]
) -> None:
    with judge_stub(reply=lambda body: '{"key_turns": [{"turn": 1, "scores": "great"}]}') as stub:
        rubric_judge = stub_judge(judged_lake, stub.url, prompt="rubric")
        values = rubric_judge.values(judged_turns)
        assert stub.count == 2 * N_JUDGED  # each asked again once
    report = rubric_judge.last_report
    assert sorted(report.fallbacks) == sorted(t.trajectory_id for t in judged_turns)
    assert set(report.unusable.values()) == {
        f"no key turn in 0..{len(t.turns)} with a numeric score of a rubric criterion"
        for t in judged_turns
    }
    for traj in judged_turns:
        assert values[traj.trajectory_id] == [traj.outcome] * (len(traj.turns) + 1)
    errors = judged_lake.sql(
        "SELECT count(*) FROM calls WHERE json_extract_string(attrs, '$.parse_error') IS NOT NULL"
    ).rows()
    assert errors == [(2 * N_JUDGED,)]


def test_rubric_and_default_prompts_never_share_cache_entries(
    judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns]
) -> None:
    with judge_stub() as stub:  # answers in the default prompt's format
        stub_judge(judged_lake, stub.url).values(judged_turns)
        assert stub.count == N_JUDGED
        stub.reply = rubric_reply
        rubric_judge = stub_judge(judged_lake, stub.url, prompt="rubric")
        first = rubric_judge.values(judged_turns)
        assert stub.count == 2 * N_JUDGED and rubric_judge.last_report.cache_hits == 0
        again = stub_judge(judged_lake, stub.url, prompt="rubric")
        assert again.values(judged_turns) == first
        assert stub.count == 2 * N_JUDGED and again.last_report.cache_hits == N_JUDGED
        plain = stub_judge(judged_lake, stub.url)
        plain.values(judged_turns)
        assert stub.count == 2 * N_JUDGED and plain.last_report.cache_hits == N_JUDGED
    # The same messages under the two versions are two keys.
    messages = [{"role": "user", "content": "x"}]
    assert cache_key("m", messages) != cache_key("m", messages, DEFAULT_RUBRIC.version)


def test_custom_rubric_file_is_sent_and_versioned(
    judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns], tmp_path: Path
) -> None:
    path = tmp_path / "tests-first.yaml"
    path.write_text(
        "criteria:\n"
        "  - id: wrote_test\n    title: Wrote a failing test\n"
        "    description: A new test reproduces the bug.\n    weight: 3\n"
        "  - id: tidy\n    description: The diff touches only what the fix needs.\n"
    )
    rubric = load_rubric(path)
    assert rubric.name == "tests-first" and [c.weight for c in rubric.criteria] == [3.0, 1.0]

    def reply(body: dict[str, Any]) -> str:
        n = n_turns(body)
        return json.dumps(
            {
                "key_turns": [
                    {"turn": n, "scores": {"wrote_test": 1, "tidy": 0}},
                    {"turn": 0, "scores": {"wrote_test": 0, "tidy": 0}},
                ]
            }
        )

    with judge_stub(reply=reply) as stub:
        custom = stub_judge(judged_lake, stub.url, rubric=str(path))
        values = custom.values(judged_turns)
        system = stub.requests[0]["messages"][0]["content"]
    assert custom.prompt == "rubric" and "- wrote_test: Wrote a failing test (3) — " in system
    assert "understanding" not in system
    # Points 0 → 0 and T → (ignored: the outcome anchors V(s_T)): the curve rises linearly.
    traj = judged_turns[0]
    assert values[traj.trajectory_id] == pytest.approx(
        interpolate({0: 0.0}, len(traj.turns), float(traj.outcome or 0.0))
    )
    stored = judged_lake.sql(
        "SELECT DISTINCT json_extract_string(attrs, '$.prompt_version') FROM calls"
    ).rows()
    assert stored == [(rubric.version,)] and rubric.version != DEFAULT_RUBRIC.version
    # Editing the rubric changes its version, hence every cache key.
    edited = rubric_from_data(
        {"name": "tests-first", "criteria": [{"id": "wrote_test", "description": "x"}]}
    )
    assert edited.version != rubric.version


def test_bad_rubric_files_are_named(judged_lake: tl.Lake, tmp_path: Path) -> None:
    cases = {
        "broken.json": ('{"criteria": [', "is not valid JSON"),
        "noid.yaml": ("- description: d\n", "criterion 1 needs an 'id'"),
        "weight.json": ('[{"id": "a", "description": "d", "weight": -1}]', "finite 'weight' > 0"),
        "twice.json": (
            '[{"id": "a", "description": "d"}, {"id": "a", "description": "e"}]',
            "repeat",
        ),
        "empty.yaml": ("criteria: []\n", "no criteria"),
        "extra.json": (
            '{"criteria": [{"id": "a", "description": "d", "wieght": 2}]}',
            "unknown fields",
        ),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(TrajlakeError, match=re.escape(name) + ".*" + re.escape(message)):
            load_rubric(path)
    with pytest.raises(TrajlakeError, match=r"cannot read rubric file .*missing\.json"):
        load_rubric(tmp_path / "missing.json")
    with pytest.raises(ValueError, match=r"must end in \.json, \.yaml or \.yml"):
        load_rubric(tmp_path / "rubric.txt")
    with pytest.raises(ValueError, match="prompt='rubric'"):
        JudgeValues(judged_lake, "http://127.0.0.1:9", "m", prompt="default", rubric=DEFAULT_RUBRIC)
    with pytest.raises(ValueError, match="prompt must be"):
        JudgeValues(judged_lake, "http://127.0.0.1:9", "m", prompt="rubrik")  # type: ignore[arg-type]


def test_credit_cli_with_the_rubric_judge(tmp_path: Path) -> None:
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.write(list(sample_trajectories(N_JUDGED)))
    runner = CliRunner()
    with judge_stub(reply=rubric_reply) as stub:
        base = credit_cli_args(lake, stub, "judge:rubric")
        first = runner.invoke(cli, [*base, "--name", "rubric-1"])
        assert first.exit_code == 0, first.output
        second = runner.invoke(cli, [*base, "--name", "rubric-2"])
        assert second.exit_code == 0, second.output
        assert stub.count == N_JUDGED  # the second run is answered from the cache
    report = json.loads(first.output)
    assert report["estimator"] == "judge:rubric" and report["turns"] == report["rows_added"] > 0
    rows = lake.sql(
        "SELECT trajectory_id, turn, value_before FROM credits WHERE run_name = 'rubric-1' "
        "ORDER BY trajectory_id, turn"
    ).to_dicts()
    curves = {t.trajectory_id: expected(t) for t in load_turns(lake)}
    for row in rows:
        assert row["value_before"] == pytest.approx(curves[row["trajectory_id"]][row["turn"]])
    assert value_source("judge:rubric", lake=lake, base_url=stub.url, model="m").name == (
        "judge:rubric"
    )


def test_rubric_judge_as_an_ensemble_component(tmp_path: Path) -> None:
    lake = tl.open_lake(tmp_path / "lake", create=True)
    lake.write(list(sample_trajectories(8)))  # 2 tasks × 4 rollouts
    with judge_stub(reply=rubric_reply) as stub:
        options = {"judge:rubric": {"base_url": stub.url, "model": "m", "backoff_s": 0.01}}
        report = run_credit(
            lake,
            estimator="ensemble:judge:rubric+anchor",
            folds=2,
            component_options=options,
            name="ens",
        )
        assert stub.count == 8  # one rubric question per trajectory, cached in the lake
    assert report.trajectories == 8 and report.rows_added == report.turns > 0
    assert report.params["source"]["component_options"]["judge:rubric"]["model"] == "m"
    stored = lake.sql(
        "SELECT count(*) FROM calls WHERE json_extract_string(attrs, '$.prompt_version') = ?",
        params=[DEFAULT_RUBRIC.version],
    ).rows()
    assert stored == [(8,)]


@pytest.mark.skipif(not (CORPUS / "01_sweagent_traj").is_dir(), reason="no shared corpus")
def test_real_corpus_end_to_end(lake: tl.Lake, tmp_path: Path) -> None:
    ingest_labelled_corpus(lake, tmp_path)
    with judge_stub(reply=rubric_reply) as stub:
        report = run_credit(
            lake,
            estimator="judge:rubric",
            name="rubric",
            base_url=stub.url,
            model="m",
            backoff_s=0.01,
        )
        prompts = [b["messages"][1]["content"] for b in stub.requests]
    turns = load_turns(lake)
    assert report.skipped == 0 and stub.count == len(turns)
    assert report.rows_added == sum(len(t.turns) for t in turns)
    assert all("=== TRAJECTORY ===" in p and "ACTION:" in p for p in prompts)
    rows = lake.sql(
        "SELECT c.value_before, tr.harness FROM credits c "
        "JOIN trajectories tr USING (trajectory_id) WHERE run_name = 'rubric'"
    ).to_dicts()
    assert {r["harness"] for r in rows} == {"swe-agent", "mini-swe-agent", "tau-bench"}
    assert all(0.0 <= r["value_before"] <= 1.0 for r in rows)
