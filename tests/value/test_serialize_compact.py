"""Compact, tail and patch serializers and the listwise patch group: observation types on real
trajectory text, caps, budgets with a real tokenizer, input shapes, exit status."""

from __future__ import annotations

import json
import os
import re
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
from trajlake.value.recipe import load_recipe
from trajlake.value.serialize import (
    EXIT_HEADER,
    ChatMessage,
    Conversation,
    Serializer,
    SerializerKind,
    approx_token_count,
    as_conversation,
    compact_observation,
    exit_status,
    observation_type,
    serialize,
    serialize_group,
    tokenizer_counter,
)

DATA = Path(__file__).parents[1] / "data"
MODELS = Path(__file__).parents[2] / "models"
NEW_KINDS: tuple[SerializerKind, ...] = ("compact", "tail", "patch")

# A pytest run in the shape pytest prints it: progress, one failure section, the short summary.
PYTEST_OUTPUT = "\n".join(
    [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0",
        "rootdir: /testbed",
        "collected 123 items",
        "",
        *[f"tests/test_fields.py::test_case_{i} PASSED{' ' * 20}[{i:3d}%]" for i in range(120)],
        "=================================== FAILURES ===================================",
        "_____________________________ test_timedelta_round _____________________________",
        "",
        "    def test_timedelta_round():",
        "        field = fields.TimeDelta(precision='milliseconds')",
        ">       assert field.serialize('d', {'d': timedelta(milliseconds=345)}) == 345",
        "E       assert 344 == 345",
        "",
        "tests/test_fields.py:88: AssertionError",
        "=========================== short test summary info ============================",
        "FAILED tests/test_fields.py::test_timedelta_round - assert 344 == 345",
        "FAILED tests/test_fields.py::test_timedelta_micro - assert 0 == 1",
        "FAILED tests/test_fields.py::test_timedelta_weeks - ValueError: bad unit",
        "========================= 3 failed, 120 passed in 4.21s =========================",
    ]
)
UNITTEST_OUTPUT = "\n".join(
    [
        *["." * 70 for _ in range(20)],
        "======================================================================",
        "FAIL: test_round (tests.test_fields.TestTimeDelta)",
        "----------------------------------------------------------------------",
        "Traceback (most recent call last):",
        '  File "/testbed/tests/test_fields.py", line 88, in test_round',
        "    self.assertEqual(result, 345)",
        "AssertionError: 344 != 345",
        "",
        "----------------------------------------------------------------------",
        "Ran 1400 tests in 3.002s",
        "",
        "FAILED (failures=1)",
    ]
)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return tiny_chat_tokenizer()


def _swe_agent(name: str) -> CanonicalTrajectory:
    path = DATA / "swe_agent" / name
    source = SourceFile(str(path), os.path.getsize(path))
    with source.open() as stream:
        (item,) = list(SweAgentAdapter().read(source, stream))
    assert isinstance(item, ParsedTrajectory)
    return normalize(item.record)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Real SWE-agent and mini-swe-agent runs ingested into a lake, read back by harness."""
    lake = tl.open_lake(tmp_path_factory.mktemp("corpus"), create=True)
    lake.ingest(
        [
            str(DATA / "swe_agent" / "pydicom__pydicom-1458.traj"),
            str(DATA / "swe_agent" / "marshmallow-code__marshmallow-1867.traj"),
            str(DATA / "mini_swe_agent" / "github_issue.traj.json"),
        ]
    )
    rows = read_canonical(lake)
    by_name = {}
    for row in rows:
        task = as_conversation(row).task
        name = (
            "pydicom" if "pixel" in task.lower() else "marshmallow" if "TimeDelta" in task else ""
        )
        by_name[name or "mini"] = row
    assert set(by_name) == {"pydicom", "marshmallow", "mini"}
    return by_name


def _observations(row: Any) -> list[str]:
    return [m.content for m in as_conversation(row).messages[2:] if m.role != "assistant"]


def _long_conversation(turns: int = 20) -> Conversation:
    messages = [ChatMessage("system", "You fix bugs."), ChatMessage("user", "fix the parser")]
    for t in range(turns):
        reasoning = f"think-{t} " + "because the parser " * 100 + f" end-think-{t}"
        call = ("bash", json.dumps({"command": f"cmd-{t} " + "x" * 2000 + f" end-cmd-{t}"}))
        messages.append(ChatMessage("assistant", reasoning, (call,)))
        messages.append(ChatMessage("tool", f"obs-{t} " + "y" * 5000 + f" end-obs-{t}"))
    return Conversation(
        task="fix the parser", messages=tuple(messages), final_output="PATCH\n" + "+ok\n" * 40
    )


# ---------------------------------------------------------------- observation types


def test_observation_types_on_real_text(corpus: dict[str, dict[str, Any]]) -> None:
    pydicom = _observations(corpus["pydicom"])
    assert any(o.startswith("Traceback") for o in pydicom)
    traceback = next(o for o in pydicom if o.startswith("Traceback"))
    assert observation_type(traceback) == "traceback"
    mini = _observations(corpus["mini"])
    assert observation_type(next(o for o in mini if "ZeroDivisionError" in o)) == "traceback"
    assert observation_type(next(o for o in mini if "total 44" in o)) == "listing"  # ls -la
    viewer = next(o for o in _observations(corpus["marshmallow"]) if "(1997 lines total)" in o)
    assert observation_type(viewer) == "listing"  # SWE-agent's numbered file viewer
    assert observation_type(next(o for o in mini if "hello world" in o or "8.2" in o)) == "text"
    assert observation_type(PYTEST_OUTPUT) == "test"
    assert observation_type(UNITTEST_OUTPUT) == "test"


@pytest.mark.parametrize("limit", [200, 300, 600])
def test_test_result_lines_survive_heavy_cutting(limit: int) -> None:
    assert len(PYTEST_OUTPUT) > 10 * limit
    out = compact_observation(PYTEST_OUTPUT, limit)
    assert len(out) <= limit
    assert "3 failed, 120 passed in 4.21s" in out
    if limit >= 300:
        assert "FAILED tests/test_fields.py::test_timedelta_weeks - ValueError: bad unit" in out
    if limit >= 600:
        assert "E       assert 344 == 345" in out
        assert "FAILED tests/test_fields.py::test_timedelta_round - assert 344 == 345" in out
    assert "lines cut ...]" in out and "test_case_57 PASSED" not in out
    unittest = compact_observation(UNITTEST_OUTPUT, 120)
    assert len(unittest) <= 120
    assert "Ran 1400 tests in 3.002s" in unittest and "FAILED (failures=1)" in unittest


@pytest.mark.parametrize("limit", [250, 400, 700])
def test_traceback_error_line_and_last_frames_survive(
    corpus: dict[str, dict[str, Any]], limit: int
) -> None:
    traceback = next(o for o in _observations(corpus["pydicom"]) if o.startswith("Traceback"))
    error = next(line for line in traceback.splitlines() if line.startswith("AttributeError:"))
    last_frame = '  File "/pydicom__pydicom/pydicom/pixel_data_handlers/numpy_handler.py", line 293'
    out = compact_observation(traceback, limit)
    assert len(traceback) > limit >= len(out)
    assert error in out and "    raise AttributeError(" in out
    assert (last_frame in out) == (limit >= 400)
    assert ("Traceback (most recent call last):" in out) == (limit >= 700)
    assert re.search(r"\[\.\.\. \d+ lines cut \.\.\.\]", out)
    assert 'reproduce_bug.py", line 17' not in out  # the first frame goes first


def test_listings_are_cut_in_the_middle_with_a_marker(corpus: dict[str, dict[str, Any]]) -> None:
    viewer = next(o for o in _observations(corpus["marshmallow"]) if "(1997 lines total)" in o)
    out = compact_observation(viewer, 800)
    assert len(viewer) > 2000 and len(out) <= 800
    match = re.search(r"\n\[\.\.\. (\d+) lines \((\d+) chars\) cut \.\.\.\]\n", out)
    assert match
    head, tail = out[: match.start()], out[match.end() :]
    lines = viewer.splitlines()
    n_head, n_tail = len(head.splitlines()), len(tail.splitlines())
    dropped = lines[n_head : len(lines) - n_tail]
    # The marker says exactly what was cut, and what is kept are whole lines from both ends.
    assert head.splitlines() == lines[:n_head] and tail.splitlines() == lines[len(lines) - n_tail :]
    assert int(match.group(1)) == len(dropped) and int(match.group(2)) == len("\n".join(dropped))
    assert n_head >= 3 and n_tail >= 3
    assert compact_observation(viewer, len(viewer)) == viewer  # within its cap nothing is cut


def test_other_text_is_cut_in_the_middle_and_the_marker_counts_the_cut() -> None:
    text = "".join(f"word{i} " for i in range(1000))
    out = compact_observation(text, 300)
    match = re.search(r"\n\[\.\.\. (\d+) chars cut \.\.\.\]\n", out)
    assert match and len(out) <= 300
    head, tail = out[: match.start()], out[match.end() :]
    assert text.startswith(head) and text.endswith(tail) and len(head) >= 100
    assert int(match.group(1)) == len(text) - len(head) - len(tail)


# ---------------------------------------------------------------- caps, budgets and layouts


def _assistant_blocks(text: str) -> list[str]:
    return [b.split("\nOBSERVATION:")[0] for b in text.split("ASSISTANT:\n")[1:]]


@pytest.mark.parametrize(("reasoning", "command"), [(600, 400), (100, 80)])
def test_reasoning_and_command_caps_hold(reasoning: int, command: int) -> None:
    conv = _long_conversation(turns=3)
    text = serialize(
        conv,
        "compact",
        max_tokens=100_000,
        reasoning_max_chars=reasoning,
        command_max_chars=command,
        observation_max_chars=500,
    )
    blocks = _assistant_blocks(text)
    assert len(blocks) == 3
    for t, block in enumerate(blocks):
        thought, call = block.split("\n<function=bash>")
        call = "<function=bash>" + call
        assert len(thought) <= reasoning and len(call) <= command
        assert thought.startswith(f"think-{t}") and thought.endswith(f"end-think-{t}")
        assert call.endswith("</function>") and "chars cut ...]" in call
    observations = text.split("OBSERVATION:\n")[1:]
    assert all(len(o.split("\nASSISTANT:")[0].split("\n===")[0]) <= 500 for o in observations)


def test_compact_fits_more_turns_than_whole() -> None:
    conv = _long_conversation(turns=20)
    whole = serialize(conv, "whole", max_tokens=3000, observation_max_tokens=512)
    compact = serialize(conv, "compact", max_tokens=3000)
    assert len(_assistant_blocks(compact)) > 2 * len(_assistant_blocks(whole))
    assert "end-obs-19" in compact and "You fix bugs." not in compact


@pytest.mark.parametrize("budget", [40, 300, 2048])
def test_budgets_hold_with_a_real_tokenizer(
    corpus: dict[str, dict[str, Any]], tokenizer: Any, budget: int
) -> None:
    count = tokenizer_counter(tokenizer)
    for obj in [*corpus.values(), _long_conversation()]:
        for kind in NEW_KINDS:
            serializer = Serializer(kind, max_tokens=budget).with_tokenizer(tokenizer)
            assert count(serializer.text(obj)) <= budget
            assert approx_token_count(serialize(obj, kind, max_tokens=budget)) <= budget


def test_tail_and_patch_layouts(corpus: dict[str, dict[str, Any]]) -> None:
    row = corpus["marshmallow"]
    conv = as_conversation(row)
    assert conv.final_output is not None
    tail = serialize(row, "tail", max_tokens=1500)
    assert "earlier turns omitted ...]" in tail
    assert tail.endswith(f"=== FINAL OUTPUT ===\n{conv.final_output}\n{EXIT_HEADER}\nsubmitted")
    whole = serialize(row, "whole", max_tokens=1500)
    assert "=== SYSTEM PROMPT ===" in whole and "=== SYSTEM PROMPT ===" not in tail
    patch = serialize(row, "patch", max_tokens=100_000)
    assert patch.endswith(f"=== FINAL OUTPUT ===\n{conv.final_output}\n{EXIT_HEADER}\nsubmitted")
    assert "ASSISTANT:" not in patch and "TimeDelta" in patch.split("=== FINAL OUTPUT ===")[0]
    no_patch = Conversation(task="t", messages=(ChatMessage("assistant", "I give up"),))
    assert serialize(no_patch, "patch").endswith(
        "=== FINAL OUTPUT ===\n(none)\n" + EXIT_HEADER + "\nno submission"
    )


def test_same_text_from_every_shape(tmp_path: Path, tokenizer: Any) -> None:
    synth = generate(SynthConfig(seed=0, n_tasks=3, rollouts_per_task=4)).trajectories
    record = next(t for t in synth if t["final_output"] and len(t["messages"]) > 10)
    lake = tl.open_lake(tmp_path, create=True)
    lake.write([record])
    (row,) = read_canonical(lake)
    wrapped = {
        "messages": to_openai_messages(record["messages"]),
        "task": as_conversation(record).task,
        "final_output": record["final_output"],
    }
    shapes = [record, CanonicalTrajectory.model_validate(record), row, wrapped]
    for kind in NEW_KINDS:
        serializer = Serializer(kind, max_tokens=300).with_tokenizer(tokenizer)
        texts = {serializer.text(shape) for shape in shapes}
        assert len(texts) == 1, kind
    group = serialize_group(shapes, tokenizer, 1200)
    patches = {group.text[a:b] for a, b in group.patch_spans}
    assert patches == {record["final_output"]}


def test_exit_status_is_read_from_the_conversation() -> None:
    def ending(*messages: ChatMessage, final: str | None = None) -> Conversation:
        return Conversation(
            task="t", messages=(ChatMessage("user", "t"), *messages), final_output=final
        )

    said = ChatMessage("assistant", "trying")
    assert exit_status(ending(said, final="diff")) == "submitted"
    assert exit_status(ending(said, ChatMessage("tool", "Exited (exit_cost)"))) == "limits"
    assert exit_status(ending(said, ChatMessage("tool", "Reached the step limit"))) == "limits"
    traceback = 'Traceback (most recent call last):\n  File "a.py", line 1\nKeyError: 1'
    assert exit_status(ending(said, ChatMessage("tool", traceback))) == "error"
    assert exit_status(ending(said, ChatMessage("tool", "ok"))) == "no submission"
    text = serialize(ending(said, ChatMessage("tool", "Exited (exit_cost)")), "compact")
    assert text.endswith(f"{EXIT_HEADER}\nlimits")


# ---------------------------------------------------------------- listwise group


def _candidates(patches: list[str | None]) -> list[dict[str, Any]]:
    return [
        {
            "task_id": "repo-1",
            "messages": [
                {"role": "user", "content": "ISSUE: the parser breaks on empty input"},
                {"role": "assistant", "content": f"attempt {i}"},
            ],
            "final_output": patch,
        }
        for i, patch in enumerate(patches)
    ]


def test_group_splits_the_budget_evenly(tokenizer: Any) -> None:
    count = tokenizer_counter(tokenizer)
    long = "diff --git a/p.py b/p.py\n" + "".join(f"+line {i} of the change\n" for i in range(400))
    patches = [long, "+short fix\n", None, long.replace("line", "row")]
    group = serialize_group(_candidates(patches), tokenizer, 600)
    assert count(group.text) <= 600
    bodies = [group.text[a:b] for a, b in group.patch_spans]
    headers = [group.text[a:b] for a, b in group.header_spans]
    assert headers == [
        "=== CANDIDATE 1 (submitted) ===",
        "=== CANDIDATE 2 (submitted) ===",
        "=== CANDIDATE 3 (no submission) ===",
        "=== CANDIDATE 4 (submitted) ===",
    ]
    assert bodies[1] == "+short fix\n" and bodies[2] == "(none)"
    for body, patch in ((bodies[0], long), (bodies[3], long.replace("line", "row"))):
        head, tail = body.split("chars cut ...]")
        assert patch.startswith(head.rsplit("\n[...", 1)[0]) and patch.endswith(tail.lstrip("\n"))
    # The two long patches got the same share (to a token or two of marker and boundary).
    assert abs(count(bodies[0]) - count(bodies[3])) <= 3
    share = (600 - count(group.text.split("\n=== CANDIDATE 1")[0])) // 4
    assert share - 40 <= count(bodies[0]) <= share
    assert group.text.startswith("Below is an issue and candidate patches")
    assert "ISSUE: the parser breaks on empty input" in group.text


def test_group_rejects_mixed_tasks_and_tiny_budgets(tokenizer: Any) -> None:
    mixed = _candidates(["+a\n", "+b\n"])
    mixed[1]["task_id"] = "repo-2"
    with pytest.raises(ValueError, match="one task"):
        serialize_group(mixed, tokenizer, 400)
    with pytest.raises(ValueError, match="at least one"):
        serialize_group([], tokenizer, 400)
    with pytest.raises(ValueError, match="too small"):
        serialize_group(_candidates(["+a\n"] * 8), tokenizer, 20)
    assert approx_token_count(serialize_group(_candidates(["+a\n"]), None, 100).text) <= 100


# ---------------------------------------------------------------- settings


def test_settings_round_trip_and_recipes() -> None:
    compact = Serializer("compact", max_tokens=512, reasoning_max_chars=100)
    data = compact.to_dict()
    assert data["reasoning_max_chars"] == 100 and data["observation_max_chars"] == 1200
    assert Serializer.from_dict(data) == compact
    # Kinds that read no character caps save the same settings as before.
    assert set(Serializer("tail").to_dict()) == {"kind", "max_tokens", "observation_max_tokens"}
    with pytest.raises(ValueError, match="reasoning_max_chars"):
        Serializer("compact", reasoning_max_chars=0)
    recipe = load_recipe(MODELS / "tiny-compact.yaml")
    tiny = load_recipe(MODELS / "tiny.yaml")
    assert recipe.serializer.kind == "compact"
    assert recipe.serializer.model_dump(exclude={"kind"}) == tiny.serializer.model_dump(
        exclude={"kind"}
    )
    assert recipe.backbone == tiny.backbone and recipe.train == tiny.train
    spec = load_recipe(MODELS / "tiny.yaml", overrides={"serializer.kind": "patch"})
    assert spec.serializer.kind == "patch"
