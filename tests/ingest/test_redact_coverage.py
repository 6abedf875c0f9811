"""Everything the lake writes is redacted: trajectories, messages, quarantine (raw text, error,
source URL), labels, the proxy's `calls` rows and its spool file; plus the policy switch for
personal data, the allow-list and `redact_uri`.

Each test writes secrets in clear, then reads every table back (and every file under the lake
and the spool) and searches for each secret: none may remain.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import pickle
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import trajlake as tl
from trajlake.ingest import AllowList, IngestOptions, ingest, redact_uri
from trajlake.ingest._parse import Stamp, describe, quarantine_row
from trajlake.proxy.recorder import Recorder
from trajlake.redact import PERSONAL_KINDS, Redactor, redact_json
from trajlake.schema import TABLES

# Fakes with real shapes, assembled so that this file itself is no secret-scanner bait.
OPENAI = "sk-proj-" + "Xq9T2mLw8ZkR4vB7nC1pY6hF3dJ0sA5eG" * 2
GITHUB = "ghp_" + "R8kd02LmQz7VxW3nB5yT1pH9cF4gJ6sA2eU0"
AWS_ID = "AKIA" + "QX7RZ2MWK4NB5TYE"
AWS_SECRET = "wJa9rXUtnF" + "EMI7K7MDEN" + "GbPxRfiCYz" + "Qz81LmT4pV"
PASSWORD = "Xk29!mqPz7#v"
DB_PASSWORD = "Vb8#wQ2!rTz6"
EMAIL = "dana.kim@startup.ai"
SIGNATURE = "9f2c" + "a1b7e3d5" * 7
URL_PASSWORD = "Pq7#Lm2!xZ9k"
SECRETS = (OPENAI, GITHUB, AWS_ID, AWS_SECRET, PASSWORD, DB_PASSWORD)


def _shape(text: str) -> str:
    """`text` with every placeholder but `url_password` written `<SECRET>`."""
    return re.sub(r"<SECRET:(?!url_password)[a-z_]+:\d+>", "<SECRET>", text)


def _line(trajectory_id: str, **fields: Any) -> str:
    return json.dumps({"trajectory_id": trajectory_id, **fields})


def _rollouts() -> str:
    """Canonical JSONL: secrets in content, reasoning, tool-call arguments, attrs and output;
    then a broken line that holds a password."""
    arguments = json.dumps({"command": f"git push https://{GITHUB}@github.com/acme/app.git"})
    good = _line(
        "t-secrets",
        final_output=f"diff --git a/.env b/.env\n+DB_PASSWORD={DB_PASSWORD}",
        attrs={"env": {"note": f"export OPENAI_API_KEY={OPENAI}"}, "owner": EMAIL},
        messages=[
            {"role": "user", "content": f"deploy it; my key is {OPENAI}, mail {EMAIL}"},
            {
                "role": "assistant",
                "reasoning": "I will push with the token.",
                "tool_calls": [{"id": "c1", "name": "bash", "arguments": arguments}],
            },
            {
                "role": "tool",
                "content": f"[default]\naws_access_key_id = {AWS_ID}\n"
                f"aws_secret_access_key = {AWS_SECRET}\n",
                "attrs": {"tool_call_id": "c1"},
            },
        ],
    )
    broken = (
        '{"trajectory_id": "t-broken", "messages": [{"role": "user", "content": "PASSWORD='
        + PASSWORD
    )
    return good + "\n" + broken + "\n"


def _clear_text_in_lake(root: Path, lake: tl.Lake, secrets: tuple[str, ...]) -> list[str]:
    """Where any secret occurs in clear: every table's rows (SQL), every Parquet file's rows
    (pyarrow, all versions) and the raw bytes of every other file (the Delta log, stats)."""
    found = []
    for table in TABLES:
        try:
            rows = lake.sql(f"SELECT * FROM {table}").to_arrow().to_pylist()
        except tl.TrajlakeError:
            continue  # a table nothing was written to
        text = json.dumps(
            rows, default=lambda v: v.decode("latin-1") if isinstance(v, bytes) else str(v)
        )
        found += [f"{table}: {s}" for s in secrets if s in text]
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        if path.suffix == ".parquet":
            rows = pq.read_table(path).to_pylist()
            text = json.dumps(
                rows, default=lambda v: v.decode("latin-1") if isinstance(v, bytes) else str(v)
            )
        else:
            text = path.read_bytes().decode("latin-1")
        found += [f"{path.relative_to(root)}: {s}" for s in secrets if s in text]
    return found


def test_ingest_leaves_no_secret_in_any_table(lake: tl.Lake, tmp_path: Path) -> None:
    source = tmp_path / "rollouts.jsonl"
    source.write_text(_rollouts())
    report = lake.ingest(source, format="canonical")
    assert (report.added, report.quarantined) == (1, 1)
    assert _clear_text_in_lake(Path(lake.uri), lake, SECRETS) == []
    assert all(PASSWORD not in p for p in report.problems)

    (traj,) = lake.sql("SELECT final_output, attrs, n_redactions FROM trajectories").rows()
    assert traj[0].endswith("DB_PASSWORD=<SECRET:password:1>")
    assert EMAIL in traj[1]  # personal data is kept unless asked for
    # OPENAI (content, attrs), GITHUB, AWS_ID, AWS_SECRET, DB_PASSWORD; the quarantined
    # record's password is replaced in `quarantine` but counts for no trajectory.
    assert traj[2] == report.redactions == 6
    content = lake.sql("SELECT content FROM messages WHERE idx = 2").rows()[0][0]
    assert "aws_access_key_id = <SECRET:aws_key:1>" in content
    arguments = lake.sql("SELECT arguments FROM tool_calls").rows()[0][0]
    assert json.loads(arguments)["command"].startswith("git push https://<SECRET:github_token:1>@")
    (bad,) = lake.sql("SELECT raw, error, source_uri FROM quarantine").rows()
    assert bad[0].decode().endswith('"content": "PASSWORD=<SECRET:password:1>')
    assert bad[2] == str(source)


def test_personal_data_is_a_policy_switch(lake: tl.Lake, tmp_path: Path) -> None:
    assert {"email"} <= PERSONAL_KINDS
    source = tmp_path / "rollouts.jsonl"
    source.write_text(_rollouts())
    report = lake.ingest(source, format="canonical", redact_personal=True)
    assert report.redactions == 5 + 3  # the address in the user message, attrs... once each
    assert _clear_text_in_lake(Path(lake.uri), lake, (*SECRETS, EMAIL)) == []
    content = lake.sql("SELECT content FROM messages WHERE idx = 0").rows()[0][0]
    assert content == "deploy it; my key is <SECRET:openai_key:1>, mail <SECRET:email:1>"


def test_no_redact_keeps_everything(lake: tl.Lake, tmp_path: Path) -> None:
    source = tmp_path / "rollouts.jsonl"
    source.write_text(_rollouts())
    lake.ingest(source, format="canonical", redact=False)
    (raw,) = lake.sql("SELECT raw FROM quarantine").rows()[0]
    assert PASSWORD in raw.decode()
    assert OPENAI in lake.sql("SELECT content FROM messages WHERE idx = 0").rows()[0][0]


def test_allow_list_keeps_named_values(lake: tl.Lake, tmp_path: Path) -> None:
    source = tmp_path / "rollouts.jsonl"
    source.write_text(_rollouts())
    allow = tmp_path / "allow.txt"
    allow.write_text(f"# values of the test fixtures\n{DB_PASSWORD}\n\nre:AKIA[A-Z0-9]{{16}}\n")
    report = lake.ingest(source, format="canonical", allow_list=allow)
    assert report.redactions == 4  # OPENAI (content, attrs), GITHUB, AWS_SECRET
    (output,) = lake.sql("SELECT final_output FROM trajectories").rows()[0]
    assert output.endswith(f"DB_PASSWORD={DB_PASSWORD}")
    content = lake.sql("SELECT content FROM messages WHERE idx = 2").rows()[0][0]
    assert AWS_ID in content and AWS_SECRET not in content
    assert _clear_text_in_lake(Path(lake.uri), lake, (OPENAI, GITHUB, AWS_SECRET, PASSWORD)) == []


def test_allow_list_format_and_errors(tmp_path: Path) -> None:
    allowed = AllowList.parse("# comment\n  exact-value  \nre:test-[0-9]+\n\n#re:ignored\n")
    assert allowed.exact == frozenset({"exact-value"})
    assert allowed.allows("test-42") and not allowed.allows("a-test-42")  # whole match
    assert not allowed.allows("ignored")
    bad = tmp_path / "allow.txt"
    bad.write_text("fine\n\nre:(unclosed\n")
    with pytest.raises(ValueError, match=rf"{bad}:3: bad regex '\(unclosed'"):
        AllowList.load(bad)
    with pytest.raises(ValueError, match="cannot read the allow-list"):
        AllowList.load(tmp_path / "missing.txt")
    assert pickle.loads(pickle.dumps(allowed)) == allowed


def test_allow_list_reaches_worker_processes(lake: tl.Lake, tmp_path: Path) -> None:
    for n in range(2):
        (tmp_path / f"part-{n}.jsonl").write_text(_rollouts().replace("t-secrets", f"t-{n}"))
    allow = tmp_path / "allow.txt"
    allow.write_text(f"{DB_PASSWORD}\n")
    options = IngestOptions(allow_list=allow, workers=2, parallel_min_bytes=0)
    paths = [str(tmp_path / f"part-{n}.jsonl") for n in range(2)]
    report = ingest(lake, paths, format="canonical", options=options)
    assert (report.added, report.quarantined) == (2, 2)
    outputs = [r[0] for r in lake.sql("SELECT final_output FROM trajectories").rows()]
    assert all(o.endswith(f"DB_PASSWORD={DB_PASSWORD}") for o in outputs)
    assert _clear_text_in_lake(Path(lake.uri), lake, (OPENAI, PASSWORD)) == []


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        (
            f"https://bucket.s3.amazonaws.com/run.jsonl?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            f"&X-Amz-Credential={AWS_ID}%2F20250101%2Fus-east-1%2Fs3%2Faws4_request"
            f"&X-Amz-Security-Token=IQoJb3JpZ2luX2VjEJr&X-Amz-Expires=3600"
            f"&X-Amz-Signature={SIGNATURE}",
            "https://bucket.s3.amazonaws.com/run.jsonl?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            "&X-Amz-Credential=<SECRET>&X-Amz-Security-Token=<SECRET>"
            "&X-Amz-Expires=3600&X-Amz-Signature=<SECRET>",
        ),
        (
            f"https://acct.blob.core.windows.net/runs/a.jsonl?sv=2022-11-02&sig={SIGNATURE}",
            "https://acct.blob.core.windows.net/runs/a.jsonl?sv=2022-11-02&sig=<SECRET>",
        ),
        (
            f"https://ci:{URL_PASSWORD}@files.acme.io/a.jsonl?token=abc123&access_token=x&page=2",
            "https://ci:<SECRET:url_password:1>@files.acme.io/a.jsonl"
            "?token=<SECRET>&access_token=<SECRET>&page=2",
        ),
        # A password with `#`, `?` or `@` unencoded is replaced whole, not cut at the mark.
        ("ftp://me:p#ss?w@rd@host/x", "ftp://me:<SECRET:url_password:1>@host/x"),
        ("https://h/a?page=2&sig=Ab3#9xZ&", "https://h/a?page=2&sig=<SECRET>"),
        ("https://h/a?sig=Ab3&page=2#L10", "https://h/a?sig=<SECRET>&page=2#L10"),
        (f"https://h/run.jsonl?KEY={GITHUB}", "https://h/run.jsonl?KEY=<SECRET>"),
        (f"https://h/{GITHUB}/run.jsonl", "https://h/<SECRET>/run.jsonl"),
    ],
)
def test_redact_uri(uri: str, expected: str) -> None:
    """`<SECRET>` stands for a placeholder of the kind the detectors give (`url_signature`,
    `aws_key`, ...) or `secret` for parameters they do not know."""
    redacted = redact_uri(uri)
    assert _shape(redacted) == expected
    assert redact_uri(redacted) == redacted  # idempotent


@pytest.mark.parametrize(
    "uri",
    ["/data/runs/a.jsonl", "s3://bucket/runs/a.jsonl", "https://h/a.jsonl?page=2&sort=asc", "x"],
)
def test_redact_uri_keeps_uris_without_credentials(uri: str) -> None:
    assert redact_uri(uri) is uri


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests would go to stderr


@contextlib.contextmanager
def _http_server(directory: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_source_url_credentials_are_not_stored(lake: tl.Lake, tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    (served / "rollouts.jsonl").write_text(_rollouts())
    with _http_server(served) as host:
        url = f"http://{host}/rollouts.jsonl?X-Amz-Signature={SIGNATURE}&token={URL_PASSWORD}"
        report = lake.ingest(url, format="canonical")
    assert (report.added, report.quarantined) == (1, 1)
    secrets = (*SECRETS, SIGNATURE, URL_PASSWORD)
    assert _clear_text_in_lake(Path(lake.uri), lake, secrets) == []
    assert not [p for p in report.problems if any(s in p for s in secrets)]
    (stored,) = lake.sql("SELECT source_uri FROM trajectories").rows()[0]
    assert _shape(stored) == f"http://{host}/rollouts.jsonl?X-Amz-Signature=<SECRET>&token=<SECRET>"
    assert lake.sql("SELECT source_uri FROM quarantine").rows() == [(stored,)]
    assert report.problems == [f"{stored}:2: " + report.problems[0].split(": ", 1)[1]]


def test_quarantine_error_quoting_raw_text_is_redacted() -> None:
    from trajlake.ingest._adapter import BadRecord
    from trajlake.ingest._parse import ParseTask

    stamp = Stamp("ingest-1", __import__("datetime").datetime(2026, 1, 1), redact_personal=True)
    task = ParseTask(f"https://u:{URL_PASSWORD}@h/a.jsonl", 10, None, "canonical")
    raw = f'{{"api_key": "{OPENAI}", "mail": "{EMAIL}"'.encode()
    bad = BadRecord(f"field 'x': Input should be a string [input_value='{OPENAI}']", 1, 0, "x", raw)
    row = quarantine_row(task, bad, stamp)
    assert row["raw"] == b'{"api_key": "<SECRET:openai_key:1>", "mail": "<SECRET:email:1>"'
    assert (
        row["error"] == "field 'x': Input should be a string [input_value='<SECRET:openai_key:1>']"
    )
    assert row["source_uri"] == "https://u:<SECRET:url_password:1>@h/a.jsonl"
    message = describe(task.uri, bad, stamp)
    assert OPENAI not in message and URL_PASSWORD not in message
    assert message.startswith("https://u:<SECRET:url_password:1>@h/a.jsonl:1: field 'x'")
    stamp = pickle.loads(pickle.dumps(Stamp("i", stamp.now, allow_list=AllowList.parse(OPENAI))))
    assert quarantine_row(task, bad, stamp)["raw"] == raw  # allowed; personal data kept


def test_labels_free_text_and_source_are_redacted(lake: tl.Lake, tmp_path: Path) -> None:
    source = tmp_path / "rollouts.jsonl"
    source.write_text(_rollouts())
    lake.ingest(source, format="canonical")
    labels = tmp_path / "labels.jsonl"
    note = f"judge saw OPENAI_API_KEY={OPENAI} in the log"
    labels.write_text(json.dumps({"trajectory_id": "t-secrets", "resolved": True, "note": note}))
    lake.label(labels)
    (details,) = lake.sql("SELECT details FROM labels").rows()[0]
    assert "OPENAI_API_KEY=<SECRET:openai_key:1>" in str(details)
    assert _clear_text_in_lake(Path(lake.uri), lake, SECRETS) == []


# ------------------------------------------------------------------------------ proxy


def _request(content: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": content}]}


def _response(content: str) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


def _call(
    recorder: Recorder, rollout: str, request: Any, response: Any, error: str | None = None
) -> None:
    ticket = recorder.begin_call(rollout, {})
    recorder.end_call(
        ticket,
        dialect="chat",
        endpoint="/v1/chat/completions",
        stream=False,
        request=request,
        response=response,
        status_code=200,
        error=error,
    )


def _spool_text(spool: Path) -> str:
    return "".join(p.read_text() for p in sorted(spool.glob("*.jsonl")))


def test_proxy_spool_and_calls_hold_no_clear_secret(lake: tl.Lake, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    recorder = Recorder(lake, spool, max_seconds=0.05)
    recorder.start()
    first = _request(f"my key is {OPENAI}; DB_PASSWORD={DB_PASSWORD}")
    forwarded = json.dumps(first)
    _call(recorder, "r1", first, _response(f"Use Authorization: Bearer {GITHUB} then"))
    history = first["messages"] + [{"role": "assistant", "content": "ok"}]
    second = {
        **first,
        "messages": [*history, {"role": "user", "content": f"mysql -p{DB_PASSWORD}"}],
    }
    _call(recorder, "r1", second, _response("done"), error=f"upstream said {OPENAI} is revoked")
    assert json.dumps(first) == forwarded  # what is forwarded and answered stays the original
    recorder.set_outcome("r1", {"resolved": True, "details": {"log": f"PASSWORD={PASSWORD}"}})
    secrets = (OPENAI, GITHUB, DB_PASSWORD, PASSWORD)
    text = _spool_text(spool)
    assert "<SECRET:openai_key:1>" in text and not [s for s in secrets if s in text]
    # The history repeated in the second request reads as in the first (prefix matching).
    assert text.count("my key is <SECRET:openai_key:1>; DB_PASSWORD=<SECRET:password:1>") == 2
    recorder.finish("r1")
    assert recorder.flush(10)
    recorder.close()
    assert _clear_text_in_lake(Path(lake.uri), lake, secrets) == []
    (n,) = lake.sql("SELECT n_redactions FROM trajectories").rows()[0]
    assert n >= 5
    calls = lake.sql("SELECT new_input, response, error FROM calls ORDER BY seq").rows()
    assert len(calls) == 2 and "Bearer <SECRET:github_token:1>" in str(calls[0][1])
    assert calls[1][2] == "upstream said <SECRET:openai_key:1> is revoked"
    assert "mysql -p<SECRET:password:1>" in str(calls[1][0])


def test_proxy_restart_numbers_new_secrets_after_spooled_ones(
    lake: tl.Lake, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    recorder = Recorder(lake, spool, max_seconds=0.05, redact_personal=True)
    recorder.start()
    _call(recorder, "r1", _request(f"key {OPENAI} mail {EMAIL}"), _response("ok"))
    recorder.close()  # r1 is open: it stays in the spool
    assert EMAIL not in _spool_text(spool) and OPENAI not in _spool_text(spool)

    other = "sk-proj-" + "Lm4Kq8Wz2Rt6Yp1Xc5Vb9Nj3Hf7Gd0Sa" * 2
    recorder = Recorder(lake, spool, max_seconds=0.05, redact_personal=True)
    assert recorder.start() == 1
    _call(recorder, "r1", _request(f"now {other}"), _response("ok"))
    recorder.finish("r1")
    assert recorder.flush(10)
    recorder.close()
    contents = [
        r[0]
        for r in lake.sql("SELECT content FROM messages WHERE role = 'user' ORDER BY idx").rows()
    ]
    assert contents == [
        "key <SECRET:openai_key:1> mail <SECRET:email:1>",
        "now <SECRET:openai_key:2>",
    ]
    assert _clear_text_in_lake(Path(lake.uri), lake, (OPENAI, other, EMAIL)) == []


def test_proxy_allow_list_and_personal_default(lake: tl.Lake, tmp_path: Path) -> None:
    recorder = Recorder(
        lake, tmp_path / "spool", max_seconds=0.05, allow_list=AllowList.parse(GITHUB)
    )
    recorder.start()
    _call(recorder, "r1", _request(f"{GITHUB} {OPENAI} {EMAIL}"), _response("ok"))
    text = _spool_text(tmp_path / "spool")
    assert GITHUB in text and EMAIL in text and OPENAI not in text
    recorder.finish("r1")
    assert recorder.flush(10)
    recorder.close()
    (content,) = lake.sql("SELECT content FROM messages WHERE role = 'user'").rows()[0]
    assert content == f"{GITHUB} <SECRET:openai_key:1> {EMAIL}"


def test_redact_json_copies_and_caches() -> None:
    value = {"a": [f"PASSWORD={PASSWORD}", {"b": OPENAI}], "n": 1, "k": None}
    cache: dict[str, str] = {}
    redactor = Redactor()
    copy, count = redact_json(value, redactor, cache)
    assert copy == {
        "a": ["PASSWORD=<SECRET:password:1>", {"b": "<SECRET:openai_key:1>"}],
        "n": 1,
        "k": None,
    }
    assert count == 2 and value["a"][0] == f"PASSWORD={PASSWORD}"
    again, count = redact_json({"c": [OPENAI]}, redactor, cache)
    assert (again, count) == ({"c": ["<SECRET:openai_key:1>"]}, 0)  # from the cache
    assert redact_json(3, redactor) == (3, 0)
    assert redact_json(f"x {OPENAI}", Redactor()) == ("x <SECRET:openai_key:1>", 1)
