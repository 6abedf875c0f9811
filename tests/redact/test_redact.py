"""Secret redaction: corpus recall and false positives, placeholders, fields, JSON, idempotence.

The corpus under tests/data/redaction holds generated fakes with the shapes of real secrets
(never real ones) in realistic lines, and near-misses that must stay untouched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trajlake.redact import (
    KINDS,
    Redactor,
    evaluate,
    redact_text,
    redact_trajectory,
)
from trajlake.schema import CanonicalTrajectory

DATA = Path(__file__).resolve().parents[1] / "data" / "redaction"

# Fakes with real shapes, assembled so that this file itself is no secret-scanner bait.
OPENAI = "sk-proj-" + "Xq9T2mLw8ZkR4vB7nC1pY6hF3dJ0sA5eG" * 2
OPENAI_2 = "sk-" + "aB3dE5gH7jK9mN2pQ4sT6vW8yZ1cF0hJ" + "T3BlbkFJ" + "k2L4n6P8r0T2v4X6z8B0"
GITHUB = "ghp_" + "R8kd02LmQz7VxW3nB5yT1pH9cF4gJ6sA2eU0"
PASSWORD = "Xk29!mqPz7#v"
EMAIL = "dana.kim@startup.ai"
PRIVATE_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + "\n".join(["MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"] * 4)
    + "\n-----END RSA PRIVATE KEY-----"
)


def _trajectory(**fields: Any) -> CanonicalTrajectory:
    return CanonicalTrajectory.model_validate({"trajectory_id": "t-1", **fields})


def _all_text(record: CanonicalTrajectory) -> str:
    return json.dumps(record.model_dump(mode="json"))


@pytest.fixture(scope="module")
def corpus_report() -> dict[str, Any]:
    return evaluate(DATA / "positives.jsonl", DATA / "negatives.jsonl")


def test_corpus_is_large_and_covers_every_kind(corpus_report: dict[str, Any]) -> None:
    assert corpus_report["positives"] >= 150
    assert corpus_report["negatives"] >= 150
    assert set(corpus_report["per_kind"]) == set(KINDS)
    assert all(stats["n"] >= 8 for stats in corpus_report["per_kind"].values())


def test_corpus_recall_and_false_positives(corpus_report: dict[str, Any]) -> None:
    assert corpus_report["misses"] == []
    assert corpus_report["false_positives"] == []
    assert corpus_report["recall"] >= 0.99
    assert corpus_report["false_positive_rate"] == 0.0
    for kind, stats in corpus_report["per_kind"].items():
        assert stats["recall"] >= 0.99, kind


def test_corpus_secrets_are_fakes_of_the_right_shape() -> None:
    for line in (DATA / "positives.jsonl").read_text().splitlines():
        case = json.loads(line)
        assert case["kind"] in KINDS
        assert case["secret"] in case["text"]


def test_evaluate_reports_misses_and_false_positives() -> None:
    report = evaluate(
        [
            {"kind": "email", "text": f"mail {EMAIL} now", "secret": EMAIL},
            {"kind": "password", "text": "no secret here: hunter", "secret": "hunter"},
        ],
        [{"kind": "prose", "text": f"ping {EMAIL}"}, {"kind": "prose", "text": "plain"}],
    )
    assert report["recall"] == 0.5
    assert report["false_positive_rate"] == 0.5
    assert report["per_kind"] == {
        "email": {"n": 1, "recall": 1.0},
        "password": {"n": 1, "recall": 0.0},
    }
    assert report["per_category"] == {"prose": {"n": 2, "false_positive_rate": 0.5}}
    assert [m["kind"] for m in report["misses"]] == ["password"]
    assert report["false_positives"][0]["redacted"] == "ping <SECRET:email:1>"
    with pytest.raises(ValueError, match="does not occur"):
        evaluate([{"kind": "email", "text": "x", "secret": EMAIL}], [])


def test_same_secret_same_placeholder_numbered_per_kind() -> None:
    record = _trajectory(
        messages=[
            {"role": "user", "content": f"key {OPENAI}, mail {EMAIL}"},
            {"role": "assistant", "content": f"other key {OPENAI_2}"},
            {"role": "tool", "content": f"again {OPENAI} and {EMAIL}"},
        ]
    )
    assert redact_trajectory(record, Redactor(personal=True)) == 5
    assert [m.content for m in record.messages] == [
        "key <SECRET:openai_key:1>, mail <SECRET:email:1>",
        "other key <SECRET:openai_key:2>",
        "again <SECRET:openai_key:1> and <SECRET:email:1>",
    ]


def test_numbering_restarts_for_each_trajectory() -> None:
    first = _trajectory(messages=[{"role": "user", "content": f"{OPENAI_2} {OPENAI}"}])
    second = _trajectory(messages=[{"role": "user", "content": f"{OPENAI}"}])
    redact_trajectory(first)
    redact_trajectory(second)
    assert first.messages[0].content == "<SECRET:openai_key:1> <SECRET:openai_key:2>"
    assert second.messages[0].content == "<SECRET:openai_key:1>"


def test_every_free_text_field_is_redacted_in_place() -> None:
    arguments = json.dumps({"command": f"git push https://{GITHUB}@github.com/acme/app.git"})
    record = _trajectory(
        final_output=f"diff --git a/.env b/.env\n+DB_PASSWORD={PASSWORD}",
        exit_reason=f"crashed: {OPENAI_2}",
        attrs={"user": {"emails": [EMAIL], "n": 3}, "note": None},
        tools=[{"name": "deploy", "description": f"uses {GITHUB}"}],
        messages=[
            {
                "role": "user",
                "content": f"my key is {OPENAI}",
                "parts": [{"type": "text", "text": f"my key is {OPENAI}"}, {"type": "image"}],
                "attrs": {"meta": [{"token_note": f"Bearer {GITHUB}"}]},
            },
            {
                "role": "assistant",
                "reasoning": f"The user leaked {OPENAI}; I must not repeat it.",
                "tool_calls": [{"id": "c1", "name": "bash", "arguments": arguments}],
            },
        ],
    )
    count = redact_trajectory(record, Redactor(personal=True))
    text = _all_text(record)
    for secret in (OPENAI, OPENAI_2, GITHUB, PASSWORD, EMAIL):
        assert secret not in text
    assert count == text.count("<SECRET:")
    assert record.messages[0].parts is not None
    assert record.messages[0].parts[0].text == "my key is <SECRET:openai_key:1>"
    assert record.messages[0].attrs == {"meta": [{"token_note": "Bearer <SECRET:github_token:1>"}]}
    assert record.messages[1].reasoning == (
        "The user leaked <SECRET:openai_key:1>; I must not repeat it."
    )
    assert record.attrs == {"user": {"emails": ["<SECRET:email:1>"], "n": 3}, "note": None}
    assert record.tools == [{"name": "deploy", "description": "uses <SECRET:github_token:1>"}]
    assert record.final_output is not None and record.final_output.endswith(
        "DB_PASSWORD=<SECRET:password:1>"
    )
    assert record.exit_reason == "crashed: <SECRET:openai_key:2>"
    assert record.n_redactions == 0  # the caller records the count


@pytest.mark.parametrize(
    "command",
    [
        f"export OPENAI_API_KEY={OPENAI}\npython run.py",
        f"cat .env\nDB_PASSWORD={PASSWORD}\nAPI_URL=https://api.acme.io",
        f"git log\nAuthor: Dana <{EMAIL}>\n\ttab",
        f"cat > key.pem <<'EOF'\n{PRIVATE_KEY}\nEOF",
        'echo \'{"password": "' + PASSWORD + "\"}' > cfg.json",
        f'curl -H "Authorization: Bearer {GITHUB}" https://api.github.com/user',
    ],
)
def test_tool_call_arguments_stay_valid_json(command: str) -> None:
    arguments = json.dumps({"command": command, "timeout": 30})
    record = _trajectory(
        messages=[{"role": "assistant", "tool_calls": [{"name": "bash", "arguments": arguments}]}]
    )
    assert redact_trajectory(record, Redactor(personal=True)) >= 1
    calls = record.messages[0].tool_calls
    assert calls is not None and calls[0].arguments is not None
    decoded = json.loads(calls[0].arguments)  # still valid JSON
    assert decoded["timeout"] == 30
    assert "<SECRET:" in decoded["command"]
    for secret in (OPENAI, PASSWORD, EMAIL, PRIVATE_KEY, GITHUB):
        assert secret not in decoded["command"]


def test_redacting_twice_changes_nothing_the_second_time() -> None:
    record = _trajectory(
        final_output=f"postgres://app:{PASSWORD}@db:5432/app",
        messages=[
            {"role": "user", "content": f"PASSWORD={PASSWORD} {EMAIL} {OPENAI}\n{PRIVATE_KEY}"},
            {"role": "tool", "content": f'{{"api_key": "{OPENAI_2}", "Authorization": "x"}}'},
        ],
    )
    assert redact_trajectory(record) > 0
    once = record.model_dump()
    assert redact_trajectory(record) == 0
    assert record.model_dump() == once


@pytest.mark.parametrize(
    "text",
    [
        "PASSWORD=<SECRET:password:1>",
        "postgres://app:<SECRET:url_password:1>@db/app",
        "Authorization: Bearer <SECRET:auth_header:1>",
        '{"api_key": "<SECRET:secret:2>", "email": "<SECRET:email:1>"}',
        "https://hooks.slack.com/services/<SECRET:slack_webhook:1>",
        "aws_secret_access_key = <SECRET:aws_secret:1>",
    ],
)
def test_placeholders_are_not_secrets(text: str) -> None:
    assert redact_text(text) == (text, 0)


def test_a_known_secret_is_replaced_wherever_it_recurs() -> None:
    record = _trajectory(
        messages=[
            {"role": "tool", "content": f"DB_PASSWORD={PASSWORD}"},
            {"role": "assistant", "content": f"Connecting with mysql -uroot -p{PASSWORD}"},
        ]
    )
    assert redact_trajectory(record) == 2
    assert record.messages[1].content == "Connecting with mysql -uroot -p<SECRET:password:1>"


def test_text_without_secrets_is_returned_as_is() -> None:
    texts = ["def f(x):\n    return x @ w", "commit 3f2a9b1c4d5e6f708192a3b4c5d6e7f809102132"]
    out, count = Redactor().redact_texts(texts)
    assert count == 0
    assert all(a is b for a, b in zip(out, texts, strict=True))


def test_kinds_limit_what_is_replaced() -> None:
    text = f"{EMAIL} {OPENAI}"
    assert Redactor(kinds={"email"}).redact_text(text) == (f"<SECRET:email:1> {OPENAI}", 1)
    with pytest.raises(ValueError, match="unknown secret kind"):
        Redactor(kinds={"emails"})
