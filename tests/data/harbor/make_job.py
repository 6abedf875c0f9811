"""Builds `claude-code-job/`: a Harbor job folder of two Claude Code trials (see SOURCE.txt).

Each trial's native session is a real Claude Code transcript (marot/spotter, MIT); its ATIF
`agent/trajectory.json` is what Harbor's Claude Code agent writes from that session, following
`ClaudeCode._convert_events_to_trajectory` in Harbor's `src/harbor/agents/installed/claude_code.py`
(sessions sorted by timestamp, sidechain events first; one agent step per assistant message with
text, one per tool call carrying its result; usage taken from the first line of each message id,
`prompt_tokens = input_tokens + cache_read_input_tokens`). `config.json`/`result.json` follow
Harbor's `TrialConfig`/`TrialResult` models; their verifier values are set here for the tests.

Run from the repository root: `python tests/data/harbor/make_job.py CORPUS_TRANSCRIPTS_DIR`.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent / "claude-code-job"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _split(content: Any) -> tuple[str, str | None, list[dict[str, Any]]]:
    if isinstance(content, str):
        return content.strip(), None, []
    texts, thoughts, tools = [], [], []
    for block in content if isinstance(content, list) else []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_use":
            tools.append(block)
        elif kind in ("thinking", "reasoning", "analysis"):
            value = block.get("text") if block.get("text") is not None else block.get("thinking")
            thoughts.append(_text(value).strip())
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            texts.append(block["text"])
        else:
            texts.append(_text(block))
    text = "\n\n".join(t.strip() for t in texts if t and t.strip())
    thought = "\n\n".join(t for t in thoughts if t)
    return text, thought or None, tools


def _metrics(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    cached = usage.get("cache_read_input_tokens", 0)
    extra = {k: v for k, v in usage.items() if k not in ("input_tokens", "output_tokens")}
    return {
        "prompt_tokens": usage.get("input_tokens", 0) + cached,
        "completion_tokens": usage.get("output_tokens", 0),
        "cached_tokens": cached,
        "extra": extra or None,
    }


def _result_text(block: dict[str, Any], used: Any) -> str | None:
    parts = []
    content = block.get("content")
    if isinstance(content, str) and content.strip():
        parts.append(content.strip())
    elif isinstance(content, list):
        parts += [_text(item).strip() for item in content if _text(item).strip()]
    if isinstance(used, dict):
        chunks = []
        if used.get("stdout"):
            chunks.append(f"[stdout]\n{used['stdout']}".rstrip())
        if used.get("stderr"):
            chunks.append(f"[stderr]\n{used['stderr']}".rstrip())
        code = used.get("exitCode") or used.get("exit_code")
        if code not in (None, 0):
            chunks.append(f"[exit_code] {code}")
        if used.get("interrupted"):
            chunks.append(f"[interrupted] {used['interrupted']}")
        if used.get("isImage"):
            chunks.append(f"[is_image] {used['isImage']}")
        skip = {"stdout", "stderr", "exitCode", "exit_code", "interrupted", "isImage"}
        rest = {k: v for k, v in used.items() if k not in skip}
        if rest:
            chunks.append(f"[metadata] {json.dumps(rest, ensure_ascii=False)}")
        if chunks:
            parts.append("\n".join(chunks))
    if block.get("is_error") is True:
        parts.append("[error] tool reported failure")
    return "\n\n".join(p for p in parts if p).strip() or None


def _events(lines: list[dict[str, Any]], default_model: str | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    pending: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for event in lines:
        message, when = event.get("message"), event.get("timestamp")
        if not isinstance(message, dict):
            continue
        if event.get("type") == "assistant":
            text, thought, tools = _split(message.get("content"))
            mid = message.get("id")
            metrics = None if mid and mid in seen else _metrics(message.get("usage"))
            if mid:
                seen.add(mid)
            model = message.get("model") or default_model
            if text or thought or not tools:
                out.append({"kind": "message", "timestamp": when, "role": "assistant",
                            "text": text, "reasoning": thought, "metrics": metrics,
                            "model_name": model})  # fmt: skip
                metrics = None
            for i, block in enumerate(tools):
                if not block.get("id"):
                    continue
                args = block.get("input")
                pending[block["id"]] = {
                    "kind": "tool_call", "timestamp": when, "call_id": block["id"],
                    "tool_name": block.get("name") or "",
                    "arguments": args if isinstance(args, dict) else {"input": args},
                    "reasoning": thought, "metrics": metrics if i == 0 else None,
                    "model_name": model,
                }  # fmt: skip
                if i == 0:
                    metrics = None
        elif event.get("type") == "user":
            content = message.get("content")
            if isinstance(content, str):
                if content.strip():
                    out.append({"kind": "message", "timestamp": when, "role": "user",
                                "text": content.strip()})  # fmt: skip
                continue
            texts = []
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    call = pending.pop(block.get("tool_use_id"), None) or {
                        "kind": "tool_call", "timestamp": when,
                        "call_id": block.get("tool_use_id") or "", "tool_name": "",
                        "arguments": {}, "metrics": None, "model_name": default_model,
                    }  # fmt: skip
                    call["output"] = _result_text(block, event.get("toolUseResult"))
                    out.append(call)
                else:
                    texts.append(_text(block))
            joined = "\n\n".join(t.strip() for t in texts if t and t.strip())
            if joined:
                out.append({"kind": "message", "timestamp": when, "role": "user", "text": joined})
    return out + list(pending.values())


def _step(event: dict[str, Any], step_id: int) -> dict[str, Any] | None:
    step: dict[str, Any] = {"step_id": step_id, "timestamp": event.get("timestamp")}
    if event["kind"] == "message":
        step["source"] = "agent" if event["role"] == "assistant" else "user"
        step["message"] = event["text"]
        if step["source"] == "agent":
            step["reasoning_content"] = event.get("reasoning")
            step["model_name"] = event.get("model_name")
    else:
        if not event.get("call_id") or not event.get("tool_name"):
            return None  # Harbor skips a call without id or name
        step["source"] = "agent"
        step["message"] = f"Executed {event['tool_name']} {event['call_id']}"
        step["model_name"] = event.get("model_name")
        step["reasoning_content"] = event.get("reasoning")
        step["tool_calls"] = [{"tool_call_id": event["call_id"],
                               "function_name": event["tool_name"],
                               "arguments": event["arguments"]}]  # fmt: skip
        if event.get("output") is not None:
            step["observation"] = {"results": [{"source_call_id": event["call_id"],
                                                "content": event["output"]}]}  # fmt: skip
    step["metrics"] = event.get("metrics")
    return {k: v for k, v in step.items() if v is not None}


def convert(session: Path) -> dict[str, Any]:
    """The ATIF trajectory Harbor writes for a Claude Code session file."""
    lines = [json.loads(line) for line in session.read_text().splitlines() if line.strip()]
    lines.sort(key=lambda e: e.get("timestamp", ""))
    lines = [e for e in lines if e.get("isSidechain")] + [
        e for e in lines if not e.get("isSidechain")
    ]
    session_id = next(e["sessionId"] for e in lines if isinstance(e.get("sessionId"), str))
    version = next((e["version"] for e in lines if e.get("version")), "unknown")
    default_model = next(
        (e["message"]["model"] for e in lines
         if isinstance(e.get("message"), dict) and e["message"].get("model")), None,
    )  # fmt: skip
    steps = [s for i, e in enumerate(_events(lines, default_model), 1) if (s := _step(e, i))]

    def total(key: str) -> int:
        return sum(s["metrics"][key] for s in steps if s.get("metrics"))

    return {
        "schema_version": "ATIF-v1.2",
        "session_id": session_id,
        "agent": {"name": "claude-code", "version": version, "model_name": default_model,
                  "extra": {"cwds": sorted({e["cwd"] for e in lines if e.get("cwd")})}},
        "steps": steps,
        "final_metrics": {"total_prompt_tokens": total("prompt_tokens"),
                          "total_completion_tokens": total("completion_tokens"),
                          "total_cached_tokens": total("cached_tokens"),
                          "total_steps": len(steps)},
    }  # fmt: skip


TRIALS = [
    # (trial name, task name, transcript, exception, rewards in result.json, reward.txt)
    ("start-phoenix__Xa7pQ2c", "start-phoenix", "tool_heavy.jsonl", None, {"reward": 1.0}, "1"),
    ("fix-scroll__Bc3dE4f", "fix-scroll", "short.jsonl", "AgentTimeoutError", None, "0"),
]


def main(transcripts: Path) -> None:
    if HERE.exists():
        shutil.rmtree(HERE)
    job_id = "5b0c7d2e-8a41-4f4e-9d7a-3c2b1a0f9e8d"
    (HERE).mkdir(parents=True)
    (HERE / "config.json").write_text(json.dumps({
        "job_name": "claude-code-job", "n_attempts": 1,
        "agents": [{"name": "claude-code", "model_name": "anthropic/claude-opus-4-6"}],
        "datasets": [{"name": "spotter-tasks", "version": "1.0"}],
    }, indent=2) + "\n")  # fmt: skip
    (HERE / "result.json").write_text(json.dumps({
        "id": job_id, "started_at": "2026-02-10T22:57:00", "finished_at": "2026-02-10T23:40:00",
        "n_total_trials": len(TRIALS), "stats": {"n_trials": len(TRIALS), "n_errors": 1},
    }, indent=2) + "\n")  # fmt: skip
    for n, (trial, task, name, exception, rewards, reward_txt) in enumerate(TRIALS):
        source = transcripts / name
        atif = convert(source)
        folder = HERE / trial
        sessions = folder / "agent" / "sessions" / "projects" / "-home-marco-projects-spotter"
        sessions.mkdir(parents=True)
        shutil.copy(source, sessions / f"{atif['session_id']}.jsonl")
        (folder / "agent" / "trajectory.json").write_text(json.dumps(atif, indent=2) + "\n")
        (folder / "verifier").mkdir()
        (folder / "verifier" / "reward.txt").write_text(reward_txt + "\n")
        (folder / "verifier" / "test-stdout.txt").write_text(
            f"RESULT: {'PASSED' if reward_txt == '1' else 'FAILED'}\n"
        )
        stamps = [s["timestamp"] for s in atif["steps"] if s.get("timestamp")]
        config = {
            "task": {"path": f"tasks/{task}", "source": "spotter-tasks"},
            "trial_name": trial, "trials_dir": "claude-code-job",
            "agent": {"name": "claude-code", "model_name": "anthropic/claude-opus-4-6"},
            "job_id": job_id,
        }  # fmt: skip
        final = atif["final_metrics"]
        result = {
            "id": f"0000000{n}-1111-4222-8333-444444444444", "task_name": task,
            "trial_name": trial, "trial_uri": f"file:///jobs/claude-code-job/{trial}",
            "task_id": {"path": f"tasks/{task}"}, "source": "spotter-tasks",
            "task_checksum": "0" * 64, "config": config,
            "agent_info": {"name": "claude-code", "version": atif["agent"]["version"],
                           "model_info": {"name": "claude-opus-4-6", "provider": "anthropic"}},
            "agent_result": {"n_input_tokens": final["total_prompt_tokens"],
                             "n_cache_tokens": final["total_cached_tokens"],
                             "n_output_tokens": final["total_completion_tokens"],
                             "cost_usd": None},
            "verifier_result": {"rewards": rewards} if rewards else None,
            "exception_info": {"exception_type": exception,
                               "exception_message": "Agent execution timed out after 900.0 seconds",
                               "exception_traceback": "Traceback (most recent call last): ...",
                               "occurred_at": stamps[-1].rstrip("Z")} if exception else None,
            "started_at": stamps[0].rstrip("Z"), "finished_at": stamps[-1].rstrip("Z"),
            "agent_execution": {"started_at": stamps[0].rstrip("Z"),
                                "finished_at": stamps[-1].rstrip("Z")},
        }  # fmt: skip
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (folder / "result.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
