"""Value-model serializers: input shapes, judge layout, truncation, budgets, prefixes."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from trajlake.export.jsonl import read_canonical
from trajlake.ingest import ParsedTrajectory, SourceFile
from trajlake.ingest.swe_agent import SweAgentAdapter
from trajlake.records import normalize
from trajlake.schema import CanonicalTrajectory
from trajlake.synth import SynthConfig, generate
from trajlake.testing_tokenizer import tiny_chat_tokenizer, to_openai_messages
from trajlake.value.serialize import (
    END_HEADER,
    FINAL_HEADER,
    LAST_MESSAGE_HEADER,
    ChatMessage,
    Conversation,
    Serializer,
    SerializerKind,
    approx_token_count,
    as_conversation,
    n_turns,
    serialize,
    tokenizer_counter,
)

SWE_AGENT = Path(__file__).parents[1] / "data" / "swe_agent"
KINDS: tuple[SerializerKind, ...] = ("whole", "final", "prefix")


@pytest.fixture(scope="module")
def synth() -> list[dict[str, Any]]:
    return generate(SynthConfig(seed=0, n_tasks=3, rollouts_per_task=4)).trajectories


@pytest.fixture(scope="module")
def patched(synth: list[dict[str, Any]]) -> dict[str, Any]:
    """A synthetic trajectory with a patch and several turns."""
    return next(t for t in synth if t["final_output"] and len(t["messages"]) > 10)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return tiny_chat_tokenizer()


def _swe_agent(name: str) -> CanonicalTrajectory:
    path = SWE_AGENT / name
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        (item,) = list(SweAgentAdapter().read(source, stream))
    assert isinstance(item, ParsedTrajectory)
    return normalize(item.record)


def _long_conversation(turns: int = 30, obs_chars: int = 3000) -> Conversation:
    messages = [
        ChatMessage("system", "You fix bugs."),
        ChatMessage("user", "ISSUE-HEAD " + "the parser breaks " * 400 + "ISSUE-END"),
    ]
    for t in range(turns):
        messages.append(ChatMessage("assistant", f"step {t}", (("bash", json.dumps({"n": t})),)))
        messages.append(ChatMessage("tool", f"obs-start-{t} " + "x" * obs_chars + f" obs-end-{t}"))
    return Conversation(
        task=messages[1].content, messages=tuple(messages), final_output="PATCH " + "+ok\n" * 50
    )


def test_all_input_shapes_give_the_same_conversation(patched: dict[str, Any]) -> None:
    from_dict = as_conversation(patched)
    assert as_conversation(CanonicalTrajectory.model_validate(patched)) == from_dict
    assert as_conversation(from_dict) is from_dict
    openai = to_openai_messages(patched["messages"])
    wrapped = {
        "messages": openai,
        "task": from_dict.task,
        "final_output": patched["final_output"],
        "task_id": patched["task_id"],
        "trajectory_id": patched["trajectory_id"],
    }
    assert as_conversation(wrapped) == from_dict
    plain = as_conversation(openai)
    assert (plain.messages, plain.task) == (from_dict.messages, from_dict.task)
    assert plain.final_output is plain.task_id is plain.trajectory_id is None
    assert from_dict.task_id == patched["task_id"]
    assert from_dict.final_output == patched["final_output"]
    assert from_dict.task.startswith("<issue>")
    assert n_turns(from_dict) == sum(m["role"] == "assistant" for m in patched["messages"])


def test_records_read_back_from_a_lake_match(lake: tl.Lake, patched: dict[str, Any]) -> None:
    lake.write([patched])
    (stored,) = read_canonical(lake)
    assert as_conversation(stored) == as_conversation(patched)


def test_normalisation_of_parts_calls_and_tool_names() -> None:
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "sys"}]},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}, "b"]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": {"p": 1}}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
        {"role": "assistant", "content": "x", "thread": "sub-1"},
    ]
    conv = as_conversation(messages)
    assert conv.task == "a\nb"
    assert conv.messages == (
        ChatMessage("system", "sys"),
        ChatMessage("user", "a\nb"),
        ChatMessage("assistant", "", (("ls", '{"p": 1}'),)),
        ChatMessage("tool", "out", (), "ls"),
    )
    assert as_conversation({"messages": messages, "final_output": "  "}).final_output is None


def test_tool_calls_render_as_function_blocks() -> None:
    calls = (
        ("edit", json.dumps({"path": "a.py", "line": 3, "new": "x = 1"})),
        ("raw", "not json"),
        ("submit", "{}"),
    )
    conv = Conversation(
        "fix it", (ChatMessage("user", "fix it"), ChatMessage("assistant", "ok", calls))
    )
    text = serialize(conv, "whole")
    assert (
        "ASSISTANT:\nok\n<function=edit>\n<parameter=path>a.py</parameter>\n"
        "<parameter=line>3</parameter>\n<parameter=new>x = 1</parameter>\n</function>\n"
        "<function=raw>\nnot json\n</function>\n<function=submit>\n</function>"
    ) in text
    assert text.index("=== ISSUE ===\nfix it") < text.index("=== INTERACTION LOG ===")
    assert text.count("fix it") == 1  # the task message is shown once, as the issue
    assert text.endswith(END_HEADER)  # no final output known


def test_long_observation_is_cut_in_the_middle() -> None:
    conv = _long_conversation(turns=1, obs_chars=20_000)
    text = serialize(conv, "whole", max_tokens=100_000, observation_max_tokens=200)
    observation = text.split("OBSERVATION:\n")[1].split("\n" + END_HEADER)[0]
    assert observation.startswith("obs-start-0 xxx") and observation.endswith("xxx obs-end-0")
    assert "tokens omitted ...]" in observation
    assert approx_token_count(observation) <= 200
    assert "ISSUE-END" in text  # within budget nothing else is cut


@pytest.mark.parametrize("budget", [64, 300, 1000, 4096])
def test_budget_holds_with_the_default_counter(budget: int) -> None:
    convs = [_long_conversation(), as_conversation(_swe_agent("pydicom__pydicom-1458.traj"))]
    for conv in convs:
        for kind in KINDS:
            turn = n_turns(conv) - 1 if kind == "prefix" else None
            text = serialize(conv, kind, turn=turn, max_tokens=budget)
            assert approx_token_count(text) <= budget


@pytest.mark.parametrize("budget", [40, 500, 2048])
def test_budget_holds_with_a_real_tokenizer(budget: int, tokenizer: Any) -> None:
    count = tokenizer_counter(tokenizer)
    record = _swe_agent("marshmallow-code__marshmallow-1867.traj")
    for obj in (record, _long_conversation()):
        serializer = Serializer("whole", max_tokens=budget).with_tokenizer(tokenizer)
        assert count(serializer.text(obj)) <= budget
        assert count(serialize(obj, "final", max_tokens=budget, count_tokens=count)) <= budget
        prefixes = Serializer("prefix", max_tokens=budget).with_tokenizer(tokenizer)
        assert all(count(t) <= budget for t in prefixes.prefix_texts(obj))
    assert count("hello world") == len(tokenizer("hello world")["input_ids"])


def test_issue_head_and_newest_turns_are_kept() -> None:
    conv = _long_conversation(turns=30, obs_chars=1200)
    text = serialize(conv, "whole", max_tokens=2000, observation_max_tokens=4000)
    issue = text.split("=== ISSUE ===\n")[1].split("\n=== INTERACTION LOG ===")[0]
    assert issue.startswith("ISSUE-HEAD") and "ISSUE-END" not in issue
    assert approx_token_count(issue) <= 2000 // 4
    log = text.split("=== INTERACTION LOG ===\n")[1]
    kept = [t for t in range(30) if f"step {t}\n" in log]
    assert kept and kept == list(range(30 - len(kept), 30))  # a contiguous newest tail
    assert log.startswith(f"[... {30 - len(kept)} earlier turns omitted ...]")
    assert all(f"obs-end-{t}" in log for t in kept)  # kept turns are whole
    assert text.endswith(f"{FINAL_HEADER}\n{conv.final_output}")


def test_final_output_larger_than_its_share_is_cut_in_the_middle() -> None:
    conv = _long_conversation(turns=3, obs_chars=100)
    big = dataclasses.replace(conv, final_output="PATCH-HEAD\n" + "+line\n" * 2000 + "PATCH-TAIL")
    text = serialize(big, "whole", max_tokens=1000)
    output = text.split(f"{FINAL_HEADER}\n")[1]
    assert output.startswith("PATCH-HEAD") and output.endswith("PATCH-TAIL")
    assert "tokens omitted ...]" in output and approx_token_count(output) <= 1000 // 4
    assert "step 2" in text  # the newest turn still fits


def test_final_kind_shows_issue_and_output(patched: dict[str, Any]) -> None:
    text = serialize(patched, "final")
    conv = as_conversation(patched)
    assert text.endswith(f"{FINAL_HEADER}\n{patched['final_output']}")
    assert f"=== ISSUE ===\n{conv.task}\n" in text
    assert "ASSISTANT:" not in text and "OBSERVATION:" not in text
    no_patch = Conversation(conv.task, conv.messages)
    last = next(m for m in reversed(conv.messages) if m.role == "assistant")
    fallback = serialize(no_patch, "final")
    assert f"{LAST_MESSAGE_HEADER}\n{last.content}\n<function=" in fallback


def test_prefix_stops_after_the_turns_observations(patched: dict[str, Any]) -> None:
    conv = as_conversation(patched)
    assistants = [m for m in conv.messages if m.role == "assistant"]
    text = serialize(conv, "prefix", turn=1)
    assert text.endswith(END_HEADER) and FINAL_HEADER not in text
    log = text.split("=== INTERACTION LOG ===\n")[1]
    assert log.count("ASSISTANT:") == 2 and assistants[1].content in log
    assert log.count("OBSERVATION:") == sum(
        m.role == "tool" for m in conv.messages[: conv.messages.index(assistants[2])]
    )
    for bad in (-1, n_turns(conv), None):
        with pytest.raises(ValueError, match="needs a turn"):
            serialize(conv, "prefix", turn=bad)
    with pytest.raises(ValueError, match="only for kind='prefix'"):
        serialize(conv, "whole", turn=0)


def test_prefix_texts_grow_turn_by_turn(patched: dict[str, Any]) -> None:
    serializer = Serializer("prefix", max_tokens=100_000)
    texts = serializer.prefix_texts(patched)
    assert len(texts) == n_turns(as_conversation(patched)) > 3
    bodies = [t.removesuffix(END_HEADER) for t in texts]
    assert all(b.endswith("\n") for b in bodies)
    for shorter, longer in itertools.pairwise(bodies):
        assert longer.startswith(shorter) and len(longer) > len(shorter)
    assert texts == [serializer.text(patched, turn=t) for t in range(len(texts))]
    record = _swe_agent("swe-agent__test-repo-i1.traj")  # starts with a copied demonstration
    small = Serializer("prefix", max_tokens=800).prefix_texts(record)
    assert len(small) == record.n_turns
    assert all("We're currently solving" in t.split("=== ISSUE ===")[1][:40] for t in small)


def test_output_is_deterministic(synth: list[dict[str, Any]]) -> None:
    serializer = Serializer("whole", max_tokens=300)
    assert serializer.texts(synth) == serializer.texts(json.loads(json.dumps(synth)))
    assert len(set(serializer.texts(synth))) == len(synth)


def test_serializer_round_trips_through_a_dict(tokenizer: Any) -> None:
    serializer = Serializer("final", max_tokens=1024, observation_max_tokens=64)
    data = serializer.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert Serializer.from_dict(data) == serializer
    assert serializer.with_tokenizer(tokenizer) == serializer  # the counter is not a setting
    with pytest.raises(ValueError, match="expected keys"):
        Serializer.from_dict({**data, "extra": 1})
    with pytest.raises(ValueError, match="kind"):
        Serializer.from_dict({"kind": "everything"})
    with pytest.raises(TypeError):
        Serializer.from_dict({"kind": "whole", "max_tokens": "9"})
    with pytest.raises(ValueError, match="prefix_texts"):
        Serializer("prefix").texts([])


@pytest.mark.parametrize(
    ("obj", "error", "match"),
    [
        (42, TypeError, "expected a Conversation"),
        ("text", TypeError, "expected a Conversation"),
        ([{"content": "x"}], TypeError, "string 'role'"),
        ([{"role": "robot", "content": "x"}], ValueError, "unknown message role"),
        ([{"role": "user", "content": 3}], TypeError, "content"),
        ([{"role": "assistant", "tool_calls": [{"id": "1"}]}], TypeError, "tool call"),
        ({"messages": ["hi"]}, TypeError, "each message"),
    ],
)
def test_bad_inputs_raise(obj: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        as_conversation(obj)


def test_bad_arguments_raise(patched: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        serialize(patched, "all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_tokens"):
        serialize(patched, "whole", max_tokens=0)
    with pytest.raises(TypeError, match="observation_max_tokens"):
        serialize(patched, "whole", observation_max_tokens=True)


def test_importing_the_serializers_does_not_import_torch() -> None:
    code = "import sys, trajlake.value.serialize; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
