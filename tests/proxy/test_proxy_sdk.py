"""The recording proxy driven by the official SDKs: multi-turn tool-calling conversations in every
dialect, streamed and not, then outcome + finish, then SQL over what landed in the lake."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
import requests
from stub_upstream import Reply, StubUpstream

import trajlake as tl
from trajlake.proxy.server import ProxyThread

API_KEY = "upstream-key-Q7wZ3pLk9"  # shaped so no redaction pattern hides it: absent ≠ redacted
SECRET = "sk-proj-Ab3dE5gH7jK9mN1pQ3sT5vX7zB9dF1hJ"  # in user text: must be redacted
SCRIPT = (
    Reply(text="Let me look.", tool_calls=[("bash", {"command": "ls -la"})]),
    Reply(text="", tool_calls=[("read_file", {"path": "src/a.py", "lines": 20})]),
    Reply(text="All done: a.py prints hello."),
)
TOOL_RESULTS = ["a.py\nb.py", "print('hello')"]
FUNCTIONS = [
    {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
    {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}},
        },
    },
]
USER = f"What does a.py do? (my key is {SECRET})"

StartProxy = Callable[..., ProxyThread]

# `lake` (tests/conftest.py) and `start_proxy` (tests/proxy/conftest.py) are shared fixtures.


def _close(proxy: ProxyThread, rollout: str, outcome: dict[str, Any]) -> None:
    assert requests.post(f"{proxy.url}/rollouts/{rollout}/outcome", json=outcome).ok
    done = requests.post(f"{proxy.url}/rollouts/{rollout}/finish", json={"status": "completed"})
    assert done.json() == {"rollout_id": rollout, "calls": 3, "queued": True}
    assert proxy.flush()


def _sql(lake: tl.Lake, query: str) -> list[dict[str, Any]]:
    return lake.sql(query).to_dicts()


def _messages(lake: tl.Lake, rollout: str) -> list[dict[str, Any]]:
    rows = _sql(
        lake,
        "SELECT thread, role, content, tool_calls, tool_call_id, is_copied_context FROM messages "
        f"WHERE trajectory_id = '{rollout}' ORDER BY thread, idx",
    )
    assert {r["thread"] for r in rows} == {"main"} and not any(r["is_copied_context"] for r in rows)
    return [
        {
            "role": r["role"],
            "content": r["content"] or "",
            "calls": [(c["id"], c["name"], c["arguments"]) for c in r["tool_calls"] or []],
            "tool_call_id": r["tool_call_id"],
        }
        for r in rows
    ]


def _expected(system: str | None, calls: list[list[tuple[str, str, str]]]) -> list[dict[str, Any]]:
    """The conversation as the client saw it: user, then per turn assistant + tool results."""
    out = (
        [{"role": "system", "content": system, "calls": [], "tool_call_id": None}] if system else []
    )
    out.append({"role": "user", "content": USER.replace(SECRET, "<SECRET:openai_key:1>")})
    out[-1] |= {"calls": [], "tool_call_id": None}
    for k, reply in enumerate(SCRIPT):
        out.append({"role": "assistant", "content": reply.text, "calls": calls[k]})
        out[-1]["tool_call_id"] = None
        for call_id, _, _ in calls[k]:
            out.append({"role": "tool", "content": TOOL_RESULTS[k], "calls": []})
            out[-1]["tool_call_id"] = call_id
    return out


def _check_lake(
    lake: tl.Lake,
    stub: StubUpstream,
    rollout: str,
    dialect: str,
    stream: bool,
    usage: list[tuple[int, int]],
) -> None:
    calls = _sql(
        lake,
        "SELECT seq, dialect, model, stream, status_code, error, prompt_tokens, "
        f"completion_tokens, endpoint FROM calls WHERE trajectory_id = '{rollout}' ORDER BY seq",
    )
    assert [(c["seq"], c["dialect"], c["model"], c["stream"]) for c in calls] == [
        (k, dialect, "stub-model", stream) for k in range(3)
    ]
    assert {(c["status_code"], c["error"]) for c in calls} == {(200, None)}
    assert [(c["prompt_tokens"], c["completion_tokens"]) for c in calls] == usage
    (traj,) = _sql(
        lake,
        "SELECT resolved, reward, status, prompt_tokens, completion_tokens, task_id, run_id, "
        f"generation, n_redactions FROM trajectories WHERE trajectory_id = '{rollout}'",
    )
    assert traj["resolved"] is True and traj["reward"] == 0.75 and traj["status"] == "completed"
    assert traj["prompt_tokens"] == sum(p for p, _ in usage)
    assert traj["completion_tokens"] == sum(c for _, c in usage)
    assert (traj["task_id"], traj["run_id"], traj["generation"]) == ("task-7", "run-sdk", 3)
    assert traj["n_redactions"] > 0
    # The credential reached the upstream unchanged, on every call, and is stored nowhere.
    seen = [r.headers.get("Authorization") or r.headers.get("x-api-key") for r in stub.requests]
    assert seen and set(seen) <= {f"Bearer {API_KEY}", API_KEY}
    for table in ("trajectories", "messages", "calls"):
        dump = json.dumps(_sql(lake, f"SELECT * FROM {table}"), default=str)
        assert API_KEY not in dump and SECRET not in dump
        assert "X-Trajlake" not in dump and "x-trajlake" not in dump
    assert all(not k.lower().startswith("x-trajlake") for r in stub.requests for k in r.headers)


HEADERS = {"X-Trajlake-Task": "task-7", "X-Trajlake-Generation": "3"}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_openai_chat_completions(
    stream: bool, make_stub: Callable[..., StubUpstream], start_proxy: StartProxy, lake: tl.Lake
) -> None:
    stub = make_stub(*SCRIPT)
    proxy = start_proxy(stub.url, run_id="run-sdk")
    rollout = f"chat-{stream}"
    base = f"{proxy.url}/rollouts/{rollout}/v1"
    tools = [{"type": "function", "function": f} for f in FUNCTIONS]
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coder."},
        {"role": "user", "content": USER},
    ]
    calls, usage = [], []
    with openai.OpenAI(base_url=base, api_key=API_KEY, default_headers=HEADERS) as client:
        for k in range(3):
            if stream:
                with client.chat.completions.stream(
                    model="stub-model",
                    messages=history,  # type: ignore[arg-type]
                    tools=tools,  # type: ignore[arg-type]
                    stream_options={"include_usage": True},
                ) as events:
                    completion: Any = events.get_final_completion()
            else:
                completion = client.chat.completions.create(
                    model="stub-model",
                    messages=history,
                    tools=tools,  # type: ignore[arg-type]
                )
            message = completion.choices[0].message
            turn = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []]
            calls.append(turn)
            usage.append((completion.usage.prompt_tokens, completion.usage.completion_tokens))
            history.append(message.model_dump(exclude_none=True, exclude={"parsed", "refusal"}))
            history += [
                {"role": "tool", "tool_call_id": c[0], "content": TOOL_RESULTS[k]} for c in turn
            ]
    assert calls[0][0][1:] == ("bash", '{"command": "ls -la"}')
    _close(proxy, rollout, {"resolved": True, "reward": 0.75, "details": {"tests": "3/3"}})
    assert _messages(lake, rollout) == _expected("You are a coder.", calls)
    _check_lake(lake, stub, rollout, "chat", stream, usage)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_openai_responses(
    stream: bool, make_stub: Callable[..., StubUpstream], start_proxy: StartProxy, lake: tl.Lake
) -> None:
    stub = make_stub(*SCRIPT)
    proxy = start_proxy(stub.url, run_id="run-sdk")
    rollout = f"responses-{stream}"
    tools = [{"type": "function", "strict": False, **f} for f in FUNCTIONS]
    items: list[Any] = [{"role": "user", "content": USER}]
    calls, usage = [], []
    headers = HEADERS | {"X-Trajlake-Rollout": rollout}
    with openai.OpenAI(
        base_url=f"{proxy.url}/v1", api_key=API_KEY, default_headers=headers
    ) as client:
        for k in range(3):
            options: dict[str, Any] = {"model": "stub-model", "input": items, "tools": tools}
            options["instructions"] = "You are a coder."
            if stream:
                with client.responses.stream(**options) as events:
                    response: Any = events.get_final_response()
            else:
                response = client.responses.create(**options)
            fcs = [o for o in response.output if o.type == "function_call"]
            calls.append([(o.call_id, o.name, o.arguments) for o in fcs])
            usage.append((response.usage.input_tokens, response.usage.output_tokens))
            items += [o.model_dump(exclude_none=True) for o in response.output]
            items += [
                {"type": "function_call_output", "call_id": o.call_id, "output": TOOL_RESULTS[k]}
                for o in fcs
            ]
    assert response.output_text == SCRIPT[2].text
    _close(proxy, rollout, {"resolved": True, "reward": 0.75})
    assert _messages(lake, rollout) == _expected("You are a coder.", calls)
    _check_lake(lake, stub, rollout, "responses", stream, usage)


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_anthropic_messages(
    stream: bool, make_stub: Callable[..., StubUpstream], start_proxy: StartProxy, lake: tl.Lake
) -> None:
    stub = make_stub(*SCRIPT)
    proxy = start_proxy(stub.url, run_id="run-sdk", generation=3)
    rollout = f"anthropic-{stream}"
    tools = [
        {"name": f["name"], "description": f["description"], "input_schema": f["parameters"]}
        for f in FUNCTIONS
    ]
    history: list[dict[str, Any]] = [{"role": "user", "content": USER}]
    calls, usage = [], []
    base = f"{proxy.url}/rollouts/{rollout}"
    headers = {"X-Trajlake-Task": "task-7"}  # generation from the proxy's default
    with anthropic.Anthropic(base_url=base, api_key=API_KEY, default_headers=headers) as client:
        for k in range(3):
            options: dict[str, Any] = {"model": "stub-model", "max_tokens": 256, "tools": tools}
            options |= {"messages": history, "system": "You are a coder."}
            if stream:
                with client.messages.stream(**options) as events:
                    message: Any = events.get_final_message()
            else:
                message = client.messages.create(**options)
            uses = [b for b in message.content if b.type == "tool_use"]
            calls.append([(b.id, b.name, json.dumps(b.input)) for b in uses])
            usage.append((message.usage.input_tokens, message.usage.output_tokens))
            history.append(
                {"role": "assistant", "content": [b.model_dump() for b in message.content]}
            )
            if uses:
                results = [
                    {"type": "tool_result", "tool_use_id": b.id, "content": TOOL_RESULTS[k]}
                    for b in uses
                ]
                history.append({"role": "user", "content": results})
    assert message.stop_reason == "end_turn"
    _close(proxy, rollout, {"resolved": True, "reward": 0.75})
    got = _messages(lake, rollout)
    # Anthropic tool inputs are JSON objects; compare them parsed (key order is the model's).
    norm = [m | {"calls": [(i, n, json.loads(a)) for i, n, a in m["calls"]]} for m in got]
    want = _expected("You are a coder.", calls)
    assert norm == [m | {"calls": [(i, n, json.loads(a)) for i, n, a in m["calls"]]} for m in want]
    _check_lake(lake, stub, rollout, "anthropic", stream, usage)


def test_models_passthrough_and_unknown_rollout(
    stub_upstream: StubUpstream, start_proxy: StartProxy
) -> None:
    proxy = start_proxy(stub_upstream.url)
    with openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=API_KEY) as client:
        assert [m.id for m in client.models.list()] == ["stub-model"]
    assert stub_upstream.requests[-1].headers["Authorization"] == f"Bearer {API_KEY}"
    missing = requests.post(f"{proxy.url}/rollouts/nope/finish", json={})
    assert missing.status_code == 404
    bad = requests.post(f"{proxy.url}/rollouts/x/outcome", json={"reward": "high"})
    assert bad.status_code == 400 and "reward" in bad.json()["error"]["message"]
    assert requests.get(f"{proxy.url}/health").json()["status"] == "ok"


def test_call_without_rollout_is_its_own_rollout(
    make_stub: Callable[..., StubUpstream], start_proxy: StartProxy, lake: tl.Lake
) -> None:
    stub = make_stub(Reply(text="hi"))
    proxy = start_proxy(stub.url, run_id="solo")
    with openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=API_KEY) as client:
        for _ in range(2):
            client.chat.completions.create(
                model="stub-model", messages=[{"role": "user", "content": "hello"}]
            )
    assert proxy.flush()
    rows = _sql(lake, "SELECT trajectory_id, run_id, status FROM trajectories ORDER BY 1")
    assert len(rows) == 2 and all(r["trajectory_id"].startswith("auto-solo-") for r in rows)
    assert {(r["run_id"], r["status"]) for r in rows} == {("solo", "completed")}
    assert _sql(lake, "SELECT count(*) AS n FROM messages")[0]["n"] == 4


def test_a_finished_rollout_takes_no_more_calls(
    make_stub: Callable[..., StubUpstream], start_proxy: StartProxy, lake: tl.Lake
) -> None:
    stub = make_stub(Reply(text="hi"))
    proxy = start_proxy(stub.url)
    base = f"{proxy.url}/rollouts/once/v1"
    with openai.OpenAI(base_url=base, api_key=API_KEY, max_retries=0) as client:
        ask = {"model": "stub-model", "messages": [{"role": "user", "content": "hello"}]}
        client.chat.completions.create(**ask)  # type: ignore[call-overload]
        assert requests.post(f"{proxy.url}/rollouts/once/finish", json={}).ok
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(**ask)  # type: ignore[call-overload]
    assert refused.value.status_code == 409 and "new id" in str(refused.value)
    assert proxy.flush()
    assert len(stub.requests) == 1  # the refused call never reached the upstream
    assert _sql(lake, "SELECT count(*) AS n FROM calls")[0]["n"] == 1


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_token_ids_and_logprobs_from_a_vllm_style_upstream_are_kept(
    stream: bool, make_stub: Callable[..., StubUpstream], start_proxy: StartProxy, lake: tl.Lake
) -> None:
    """Token-faithful RL data: the upstream's output token ids and logprobs land on the calls row
    and on the assistant message, in the order the tokens were generated."""
    stub = make_stub(Reply(text="The answer is 42."), return_token_ids=True)
    proxy = start_proxy(stub.url, run_id="run-ids")
    rollout = f"ids-{stream}"
    with openai.OpenAI(base_url=f"{proxy.url}/rollouts/{rollout}/v1", api_key=API_KEY) as client:
        response: Any = client.chat.completions.create(
            model="stub-model",
            messages=[{"role": "user", "content": "What is the answer?"}],
            logprobs=True,
            stream=stream,
        )
        if stream:
            chunks = list(response)
            ids = [
                t
                for c in chunks
                if c.choices
                for t in (c.choices[0].model_extra or {}).get("token_ids", []) or []
            ]
            logprobs = [
                e.logprob
                for c in chunks
                if c.choices and c.choices[0].logprobs
                for e in c.choices[0].logprobs.content or []
            ]
        else:
            ids = (response.choices[0].model_extra or {})["token_ids"]
            logprobs = [e.logprob for e in response.choices[0].logprobs.content]
    assert ids and len(ids) == len(logprobs)
    assert requests.post(f"{proxy.url}/rollouts/{rollout}/finish", json={}).ok
    assert proxy.flush()
    (call,) = _sql(lake, f"SELECT token_ids, logprobs FROM calls WHERE trajectory_id = '{rollout}'")
    (message,) = _sql(
        lake,
        "SELECT token_ids, logprobs FROM messages "
        f"WHERE trajectory_id = '{rollout}' AND role = 'assistant'",
    )
    assert call["token_ids"] == message["token_ids"] == ids
    assert call["logprobs"] == pytest.approx(logprobs)
    assert message["logprobs"] == pytest.approx(logprobs)
