"""The retrospective judge value source against a local OpenAI-compatible stub (127.0.0.1 only)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _judge_stub import judge_stub, stub_estimates

import trajlake as tl
from trajlake.credit import TrajectoryTurns, Turn
from trajlake.credit._judge_prompt import (
    build_messages,
    interpolate,
    parse_estimates,
    truncate_middle,
)
from trajlake.credit.judge import JudgeValues, cache_key
from trajlake.errors import JudgeError
from trajlake.sample import sample_trajectories

N_TRAJ = 4


def _turns_from_lake(lake: tl.Lake) -> list[TrajectoryTurns]:
    """TrajectoryTurns built by hand from `messages` (turn = messages.turn, action = content)."""
    outcomes = {
        r["trajectory_id"]: (r["task_id"], r["resolved"])
        for r in lake.sql("SELECT trajectory_id, task_id, resolved FROM trajectories").to_dicts()
    }
    rows = lake.sql(
        "SELECT trajectory_id, thread, turn, content FROM messages "
        "WHERE role = 'assistant' AND turn IS NOT NULL AND thread = 'main' "
        "ORDER BY trajectory_id, turn"
    ).to_dicts()
    out: dict[str, TrajectoryTurns] = {}
    for tid, (task, resolved) in sorted(outcomes.items()):
        outcome = None if resolved is None else float(resolved)
        out[tid] = TrajectoryTurns(trajectory_id=tid, task_id=task, outcome=outcome)
    for r in rows:
        out[r["trajectory_id"]].turns.append(
            Turn(r["trajectory_id"], r["thread"], r["turn"], r["content"] or "", (), False, None)
        )
    return list(out.values())


@pytest.fixture
def judged_lake(lake: tl.Lake) -> tl.Lake:
    lake.write(list(sample_trajectories(N_TRAJ, start=4)))  # two resolved, two not
    return lake


@pytest.fixture
def trajectories(judged_lake: tl.Lake) -> list[TrajectoryTurns]:
    try:
        from trajlake.credit.turns import load_turns
    except ImportError:
        return _turns_from_lake(judged_lake)
    loaded = load_turns(judged_lake)
    assert {t.trajectory_id for t in loaded} == {
        t.trajectory_id for t in _turns_from_lake(judged_lake)
    }
    assert {t.outcome for t in loaded} == {0.0, 1.0}
    return loaded


def _judge(lake: tl.Lake, url: str, **kwargs: Any) -> JudgeValues:
    return JudgeValues(lake, url, "stub-judge", api_key="test-key", backoff_s=0.01, **kwargs)


def _expected(traj: TrajectoryTurns) -> list[float]:
    n = len(traj.turns)
    points = {int(e["turn"]): e["value"] for e in stub_estimates(n)}
    return interpolate(points, n, float(traj.outcome or 0.0))


# Pure parts ----------------------------------------------------------------------------------


def test_interpolation_is_linear_between_key_turns_and_ends_at_the_outcome() -> None:
    # Points 0 → 0.2, 2 → 0.7, T = 4 → outcome 0: hand-computed halfway values.
    assert interpolate({0: 0.2, 2: 0.7}, 4, 0.0) == pytest.approx([0.2, 0.45, 0.7, 0.35, 0.0])
    # No prior: held flat before the first key point; an estimate at T is overridden.
    assert interpolate({2: 0.6, 4: 0.1}, 4, 1.0) == pytest.approx([0.6, 0.6, 0.6, 0.8, 1.0])
    # Out-of-range values are clipped.
    assert interpolate({0: 1.7, 1: -0.5}, 2, 1.0) == pytest.approx([1.0, 0.0, 1.0])
    assert interpolate({}, 3, 1.0) == [1.0, 1.0, 1.0, 1.0]


def test_parse_estimates_reads_fences_prose_and_drops_bad_entries() -> None:
    answer = '{"estimates": [{"turn": 0, "value": 0.3}, {"turn": 2, "value": 0.9}]}'
    fenced = f"Sure.\n```json\n{answer}\n```"
    assert parse_estimates(fenced, 4) == {0: 0.3, 2: 0.9}
    prose = 'My answer: {"estimates": [{"turn": "1", "value": "0.5"}, {"turn": 9, "value": 1}]} ok'
    assert parse_estimates(prose, 4) == {1: 0.5}
    assert parse_estimates('[{"turn": 1, "value": 1.4}]', 2) == {1: 1.0}
    assert parse_estimates("no json here", 4) is None
    assert parse_estimates('{"estimates": [{"turn": 7, "value": 0.1}]}', 4) is None


def test_prompt_numbers_turns_states_outcome_and_respects_the_budget() -> None:
    long = "x" * 50_000
    traj = TrajectoryTurns(
        "t1",
        "task",
        0.0,
        turns=[
            Turn("t1", "main", i, f"cmd {i}\n{long}\nend {i}", (), i == 1, None) for i in range(3)
        ],
    )
    user = build_messages(traj, max_chars=6_000)[1]["content"]
    assert len(user) <= 6_500
    assert "--- Turn 1 ---" in user and "--- Turn 3 ---" in user and "T = 3 turns" in user
    assert "cmd 2" in user and "end 2" in user and "characters omitted" in user
    assert "FAILURE" in user and "reported an error" in user
    assert truncate_middle("abcdef", 10) == "abcdef"


# Against the stub ----------------------------------------------------------------------------


def test_first_run_calls_and_caches_second_run_sends_nothing(
    judged_lake: tl.Lake, trajectories: list[TrajectoryTurns]
) -> None:
    with judge_stub() as stub:
        judge = _judge(judged_lake, stub.url)
        before = len(judged_lake.snapshots())
        first = judge.values(trajectories)
        assert stub.count == N_TRAJ
        assert stub.headers[0]["Authorization"] == "Bearer test-key"
        assert len(judged_lake.snapshots()) == before + 1  # one commit for all new calls
        assert judge.last_report.requests == N_TRAJ and judge.last_report.cache_hits == 0
        assert judge.last_report.snapshot_id == judged_lake.snapshots()[-1].snapshot_id

        for traj in trajectories:
            values = first[traj.trajectory_id]
            assert len(values) == len(traj.turns) + 1
            assert values[-1] == traj.outcome
            assert values == pytest.approx(_expected(traj))
            assert all(0.0 <= v <= 1.0 for v in values)

        rows = judged_lake.sql(
            "SELECT trajectory_id, dialect, endpoint, model, request_params, response, status_code,"
            " prompt_tokens, json_extract_string(attrs, '$.cache_key') AS key,"
            " json_extract_string(attrs, '$.purpose') AS purpose FROM calls"
        ).to_dicts()
        assert len(rows) == N_TRAJ
        by_traj = {r["trajectory_id"]: r for r in rows}
        for traj in trajectories:
            row = by_traj[traj.trajectory_id]
            body = json.loads(row["request_params"])
            assert (row["dialect"], row["endpoint"], row["model"]) == (
                "chat",
                "/v1/chat/completions",
                "stub-judge",
            )
            assert row["status_code"] == 200 and row["purpose"] == "credit-judge"
            assert row["prompt_tokens"] and json.loads(row["response"])["choices"]
            assert body in stub.requests  # the whole request body is stored
            assert row["key"] == cache_key("stub-judge", JudgeValues._keyed(body))

        again = _judge(judged_lake, stub.url)
        second = again.values(trajectories)
        assert stub.count == N_TRAJ  # nothing sent
        assert second == first
        assert again.last_report.cache_hits == N_TRAJ and again.last_report.snapshot_id is None
        assert len(judged_lake.snapshots()) == before + 1


def test_sample_prompts_carry_task_and_observations(
    judged_lake: tl.Lake, trajectories: list[TrajectoryTurns]
) -> None:
    with judge_stub() as stub:
        _judge(judged_lake, stub.url).values(trajectories[:1])
        prompt = stub.requests[0]["messages"][1]["content"]
    assert "=== TASK ===" in prompt and "<issue>" in prompt and "OBSERVATION:" in prompt


def test_fenced_answers_parse(judged_lake: tl.Lake, trajectories: list[TrajectoryTurns]) -> None:
    with judge_stub(mode="fenced") as stub:
        judge = _judge(judged_lake, stub.url)
        values = judge.values(trajectories)
    assert not judge.last_report.fallbacks
    assert values == {t.trajectory_id: pytest.approx(_expected(t)) for t in trajectories}


def test_malformed_answers_are_retried_once_then_fall_back_to_the_outcome(
    judged_lake: tl.Lake, trajectories: list[TrajectoryTurns]
) -> None:
    with judge_stub(mode="malformed") as stub:
        judge = _judge(judged_lake, stub.url)
        values = judge.values(trajectories)
        assert stub.count == 2 * N_TRAJ
        assert sorted(judge.last_report.fallbacks) == sorted(t.trajectory_id for t in trajectories)
        for traj in trajectories:
            assert values[traj.trajectory_id] == [traj.outcome] * (len(traj.turns) + 1)
        # The unusable answers are stored too, so a rerun repeats the fallback without requests.
        again = _judge(judged_lake, stub.url)
        assert again.values(trajectories) == values
        assert stub.count == 2 * N_TRAJ
        assert len(again.last_report.fallbacks) == N_TRAJ


def test_server_errors_are_retried(
    judged_lake: tl.Lake, trajectories: list[TrajectoryTurns]
) -> None:
    with judge_stub(fail_first=1) as stub:
        judge = _judge(judged_lake, stub.url, concurrency=1)
        values = judge.values(trajectories[:1])
        assert stub.count == 2
    traj = trajectories[0]
    assert values[traj.trajectory_id] == pytest.approx(_expected(traj))
    assert not judge.last_report.failed and judge.last_report.requests == 2


def test_exhausted_retries_fall_back_uncached_or_raise(
    judged_lake: tl.Lake, trajectories: list[TrajectoryTurns]
) -> None:
    traj = trajectories[0]
    with judge_stub(fail_first=100, fail_status=503) as stub:
        judge = _judge(judged_lake, stub.url, max_retries=2)
        values = judge.values([traj])
        assert stub.count == 3
        assert judge.last_report.failed == [traj.trajectory_id]
        assert values[traj.trajectory_id] == [traj.outcome] * (len(traj.turns) + 1)
        with pytest.raises(JudgeError):
            _judge(judged_lake, stub.url, max_retries=0, on_error="raise").values([traj])
        stub.fail_first = 0  # failures are not cache hits: the next run asks again
        fresh = _judge(judged_lake, stub.url).values([traj])
    assert fresh[traj.trajectory_id] == pytest.approx(_expected(traj))


def test_trajectories_without_outcome_or_turns(judged_lake: tl.Lake) -> None:
    empty = TrajectoryTurns("e", None, 1.0)
    unknown = TrajectoryTurns("u", None, None, turns=[Turn("u", "main", 0, "ls", (), False, None)])
    with judge_stub() as stub:
        judge = _judge(judged_lake, stub.url)
        assert judge.values([empty, unknown]) == {"e": [1.0]}
        assert stub.count == 0 and judge.last_report.skipped == ["u"]


def test_api_key_from_environment(judged_lake: tl.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJLAKE_JUDGE_API_KEY", "env-key")
    judge = JudgeValues(judged_lake, "http://127.0.0.1:9/v1", "m")
    assert judge.api_key == "env-key" and judge.url == "http://127.0.0.1:9/v1/chat/completions"
