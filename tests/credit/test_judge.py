"""The retrospective judge value source against a local OpenAI-compatible stub (127.0.0.1 only),
reached through the real `openai` SDK."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _judge_stub import N_JUDGED, judge_stub, stub_estimates, stub_judge

import trajlake as tl
from trajlake.credit import TrajectoryTurns, Turn
from trajlake.credit._judge_prompt import (
    build_messages,
    interpolate,
    parse_estimates,
    truncate_middle,
)
from trajlake.credit.judge import JudgeValues, cache_key
from trajlake.errors import JudgeError, MissingExtra


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
    judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns]
) -> None:
    with judge_stub() as stub:
        judge = stub_judge(judged_lake, stub.url)
        before = len(judged_lake.snapshots())
        first = judge.values(judged_turns)
        assert stub.count == N_JUDGED
        assert stub.headers[0]["authorization"] == "Bearer test-key"
        assert stub.headers[0]["user-agent"].startswith("OpenAI/Python")  # the real SDK
        assert len(judged_lake.snapshots()) == before + 1  # one commit for all new calls
        assert judge.last_report.requests == N_JUDGED and judge.last_report.cache_hits == 0
        assert judge.last_report.snapshot_id == judged_lake.snapshots()[-1].snapshot_id

        for traj in judged_turns:
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
        assert len(rows) == N_JUDGED
        by_traj = {r["trajectory_id"]: r for r in rows}
        for traj in judged_turns:
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

        again = stub_judge(judged_lake, stub.url)
        second = again.values(judged_turns)
        assert stub.count == N_JUDGED  # nothing sent
        assert second == first
        assert again.last_report.cache_hits == N_JUDGED and again.last_report.snapshot_id is None
        assert len(judged_lake.snapshots()) == before + 1


def test_sample_prompts_carry_task_and_observations(
    judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns]
) -> None:
    with judge_stub() as stub:
        stub_judge(judged_lake, stub.url).values(judged_turns[:1])
        prompt = stub.requests[0]["messages"][1]["content"]
    assert "=== TASK ===" in prompt and "<issue>" in prompt and "OBSERVATION:" in prompt


def test_fenced_answers_parse(judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns]) -> None:
    with judge_stub(mode="fenced") as stub:
        judge = stub_judge(judged_lake, stub.url)
        values = judge.values(judged_turns)
    assert not judge.last_report.fallbacks
    assert values == {t.trajectory_id: pytest.approx(_expected(t)) for t in judged_turns}


def test_malformed_answers_are_retried_once_then_fall_back_to_the_outcome(
    judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns]
) -> None:
    with judge_stub(mode="malformed") as stub:
        judge = stub_judge(judged_lake, stub.url)
        values = judge.values(judged_turns)
        assert stub.count == 2 * N_JUDGED
        assert sorted(judge.last_report.fallbacks) == sorted(t.trajectory_id for t in judged_turns)
        for traj in judged_turns:
            assert values[traj.trajectory_id] == [traj.outcome] * (len(traj.turns) + 1)
        # The unusable answers are stored too, so a rerun repeats the fallback without requests.
        again = stub_judge(judged_lake, stub.url)
        assert again.values(judged_turns) == values
        assert stub.count == 2 * N_JUDGED
        assert len(again.last_report.fallbacks) == N_JUDGED


def test_server_errors_are_retried(
    judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns]
) -> None:
    with judge_stub(fail_first=1) as stub:
        judge = stub_judge(judged_lake, stub.url, concurrency=1)
        values = judge.values(judged_turns[:1])
        assert stub.count == 2
    traj = judged_turns[0]
    assert values[traj.trajectory_id] == pytest.approx(_expected(traj))
    assert not judge.last_report.failed and judge.last_report.requests == 2


def test_exhausted_retries_fall_back_uncached_or_raise(
    judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns]
) -> None:
    traj = judged_turns[0]
    with judge_stub(fail_first=100, fail_status=503) as stub:
        judge = stub_judge(judged_lake, stub.url, max_retries=2)
        values = judge.values([traj])
        assert stub.count == 3
        assert judge.last_report.failed == [traj.trajectory_id]
        assert values[traj.trajectory_id] == [traj.outcome] * (len(traj.turns) + 1)
        # The error names the endpoint, so a wrong --source-option base_url is plain to see.
        with pytest.raises(JudgeError, match=f"judge requests to {stub.url}/v1/chat/completions"):
            stub_judge(judged_lake, stub.url, max_retries=0, on_error="raise").values([traj])
        stub.fail_first = 0  # failures are not cache hits: the next run asks again
        fresh = stub_judge(judged_lake, stub.url).values([traj])
    assert fresh[traj.trajectory_id] == pytest.approx(_expected(traj))


def test_trajectories_without_outcome_or_turns(judged_lake: tl.Lake) -> None:
    empty = TrajectoryTurns("e", None, 1.0)
    unknown = TrajectoryTurns("u", None, None, turns=[Turn("u", "main", 0, "ls", (), False, None)])
    with judge_stub() as stub:
        judge = stub_judge(judged_lake, stub.url)
        assert judge.values([empty, unknown]) == {"e": [1.0]}
        assert stub.count == 0 and judge.last_report.skipped == ["u"]


def test_api_key_from_environment(judged_lake: tl.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJLAKE_JUDGE_API_KEY", "env-key")
    judge = JudgeValues(judged_lake, "http://127.0.0.1:9/v1", "m")
    assert judge.api_key == "env-key" and judge.url == "http://127.0.0.1:9/v1/chat/completions"


def test_retry_after_wins_over_the_backoff(
    judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns]
) -> None:
    # A 60 s backoff would time the test out: the server's `Retry-After: 0` is what is waited.
    with judge_stub(fail_first=1, fail_status=429, retry_after="0") as stub:
        judge = stub_judge(judged_lake, stub.url, backoff_s=60.0)
        values = judge.values(judged_turns[:1])
        assert stub.count == 2
    traj = judged_turns[0]
    assert values[traj.trajectory_id] == pytest.approx(_expected(traj))


def test_client_errors_are_not_retried_and_are_stored(
    judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns]
) -> None:
    traj = judged_turns[0]
    with judge_stub(fail_first=100, fail_status=400) as stub:
        judge = stub_judge(judged_lake, stub.url, max_retries=3)
        judge.values([traj])
        assert stub.count == 1  # a 400 is the request's fault: asking again cannot help
    assert judge.last_report.failed == [traj.trajectory_id]
    (row,) = judged_lake.sql(
        "SELECT status_code, error, json_extract(attrs, '$.attempts') AS attempts FROM calls"
    ).to_dicts()
    assert row["status_code"] == 400 and row["error"].startswith("HTTP 400: ")
    assert "stub failure" in row["error"] and json.loads(row["attempts"]) == 1


def test_an_unreachable_endpoint_is_retried_then_named(
    judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns]
) -> None:
    with judge_stub() as stub:
        url = stub.url  # the port is free again once the stub stops
    judge = stub_judge(judged_lake, url, max_retries=1, on_error="raise")
    with pytest.raises(JudgeError, match=f"judge requests to {url}/v1/chat/completions failed"):
        judge.values(judged_turns[:1])
    assert judge.last_report.requests == 2
    (error,) = judged_lake.sql("SELECT error FROM calls WHERE status_code IS NULL").rows()[0]
    assert error.startswith("APIConnectionError: ")


def test_no_key_sends_the_placeholder_keyless_servers_ignore(
    judged_lake: tl.Lake, judged_turns: list[TrajectoryTurns], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRAJLAKE_JUDGE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with judge_stub() as stub:
        judge = JudgeValues(judged_lake, stub.url + "/v1/", "stub-judge")
        judge.values(judged_turns[:1])
    assert judge.api_key is None and stub.headers[0]["authorization"] == "Bearer EMPTY"
    assert not judge.last_report.failed


def test_without_the_sdk_the_judge_names_the_extra(
    judged_lake: tl.Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # what `import openai` meets when absent
    with pytest.raises(MissingExtra, match=r"pip install 'trajlake\[judge\]'"):
        JudgeValues(judged_lake, "http://127.0.0.1:9", "m")


def test_importing_the_credit_layer_does_not_import_the_sdk() -> None:
    script = "import sys, trajlake.credit.judge; print('openai' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
