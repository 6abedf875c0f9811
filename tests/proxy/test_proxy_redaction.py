"""Through the running proxy: the client gets the secrets it was sent, while the spool file on
disk and the lake's `calls`, `messages` and `trajectories` hold none in clear; a multi-call
rollout still reconstructs as one thread."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import requests
from stub_upstream import Reply, StubUpstream

import trajlake as tl
from trajlake.ingest import AllowList
from trajlake.proxy.server import ProxyThread

MakeStub = Callable[..., StubUpstream]
StartProxy = Callable[..., ProxyThread]

OPENAI = "sk-proj-" + "Xq9T2mLw8ZkR4vB7nC1pY6hF3dJ0sA5eG" * 2
GITHUB = "ghp_" + "R8kd02LmQz7VxW3nB5yT1pH9cF4gJ6sA2eU0"
PASSWORD = "Xk29!mqPz7#v"
EMAIL = "dana.kim@startup.ai"


def _spool_text(spool: Path) -> str:
    return "".join(p.read_text() for p in sorted(spool.glob("*.jsonl")))


def _lake_text(lake: tl.Lake) -> str:
    parts = []
    for table in ("trajectories", "messages", "calls"):
        parts.append(str(lake.sql(f"SELECT * FROM {table}").to_arrow().to_pylist()))
    return "\n".join(parts)


def _run_rollout(proxy: ProxyThread, rollout: str) -> list[str]:
    client = openai.OpenAI(
        base_url=f"{proxy.url}/rollouts/{rollout}/v1", api_key="k", max_retries=0
    )
    history: list[Any] = [{"role": "user", "content": f"deploy with {OPENAI}; mail {EMAIL}"}]
    answers = []
    for _ in range(2):
        reply = client.chat.completions.create(model="stub-model", messages=history)
        text = reply.choices[0].message.content or ""
        answers.append(text)
        history += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": f"DB_PASSWORD={PASSWORD}"},
        ]
    response = requests.post(f"{proxy.url}/rollouts/{rollout}/finish", json={})
    assert response.status_code == 200
    return answers


def test_spool_and_lake_hold_no_clear_secret(
    make_stub: MakeStub, start_proxy: StartProxy, lake: tl.Lake, tmp_path: Path
) -> None:
    stub = make_stub(Reply(text=f"pushed with {GITHUB}"), Reply(text="done"))
    proxy = start_proxy(stub.url, commit_seconds=60)  # read the spool before it is committed
    answers = _run_rollout(proxy, "r1")
    assert answers[0] == f"pushed with {GITHUB}"  # the client gets what the upstream sent
    spool = _spool_text(tmp_path / "spool")
    assert proxy.recorder.flush(10)
    for secret in (OPENAI, GITHUB, PASSWORD):
        assert secret not in spool
        assert secret not in _lake_text(lake)
    assert EMAIL in spool  # personal data is kept by default
    rows = lake.sql("SELECT thread, role, content FROM messages ORDER BY idx").rows()
    assert {r[0] for r in rows} == {"main"}  # the repeated history matched: one thread
    assert rows[0][2] == f"deploy with <SECRET:openai_key:1>; mail {EMAIL}"
    assert rows[1][2] == "pushed with <SECRET:github_token:1>"


def test_personal_data_and_allow_list_options(
    make_stub: MakeStub, start_proxy: StartProxy, lake: tl.Lake, tmp_path: Path
) -> None:
    proxy = start_proxy(
        make_stub(Reply(text="ok")).url,
        redact_personal=True,
        allow_list=AllowList.parse(PASSWORD),
        commit_seconds=60,
    )
    _run_rollout(proxy, "r2")
    spool = _spool_text(tmp_path / "spool")
    assert proxy.recorder.flush(10)
    assert EMAIL not in spool and OPENAI not in spool and PASSWORD in spool
    (content,) = lake.sql("SELECT content FROM messages WHERE idx = 0").rows()[0]
    assert content == "deploy with <SECRET:openai_key:1>; mail <SECRET:email:1>"
