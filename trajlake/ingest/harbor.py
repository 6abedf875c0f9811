"""Harbor trial folders: what a trial's files say about the rollout its ATIF trajectory holds.

A Harbor job folder is `<job>/{config.json, result.json}` plus one folder per trial:
`<trial>/config.json` (`TrialConfig`: task, agent, job id), `<trial>/result.json` (`TrialResult`:
task name and source, agent info and token usage, `verifier_result.rewards`, `exception_info`,
phase timings), `<trial>/agent/trajectory.json` (ATIF) and, for Claude Code, the native session
`<trial>/agent/sessions/projects/<cwd>/<sessionId>.jsonl`; `<trial>/verifier/` holds `reward.txt`
or `reward.json` and the test output.

Inside a trial folder the ATIF file is the trajectory and the native session its companion: the
session is not ingested a second time, its token totals are compared with the ATIF ones and the
comparison is kept in `attrs.harbor.native_session`. Both formats carry the session id
(`session_id` / `sessionId`) as `attrs.rollout_key`, so a session ingested on its own elsewhere
is listed with the ATIF trajectory in the `duplicates` view. The trial's outcome (rewards, else
`verifier/reward.txt`/`reward.json`) is recorded as the rollout's own, with `outcome_source`
naming the file it came from; all trials of a job share the job folder's name as `run_id`.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fsspec

from trajlake.schema import CanonicalTrajectory, Status
from trajlake.wire.values import parse_time

_TIMEOUTS = ("AgentTimeoutError", "VerifierTimeoutError", "EnvironmentStartTimeoutError")
_TIMINGS = ("environment_setup", "agent_setup", "agent_execution", "verifier")
_MESSAGE_LIMIT = 2000
"""Characters of an exception message kept in attrs (tracebacks are in the trial's files)."""


@dataclass
class Trial:
    """A Harbor trial folder, with its parsed files and what could not be read."""

    fs: Any
    path: str
    result: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The trial's name (its folder's)."""
        return posixpath.basename(self.path)

    def file(self, *parts: str) -> str:
        """Path of a file inside the trial folder."""
        return posixpath.join(self.path, *parts)


def _read_json(fs: Any, path: str, problems: list[str]) -> dict[str, Any]:
    if not fs.isfile(path):
        return {}
    try:
        with fs.open(path, "rb") as f:
            value = json.loads(f.read())
    except (OSError, ValueError) as e:
        problems.append(f"{path}: not readable JSON ({e})")
        return {}
    if not isinstance(value, dict):
        problems.append(f"{path}: expected a JSON object, got {type(value).__name__}")
        return {}
    return value


def trial_folder(uri: str) -> tuple[Any, str] | None:
    """(filesystem, trial folder) when `uri` is a trial's `agent/trajectory.json`."""
    fs, path = fsspec.core.url_to_fs(uri)
    agent = posixpath.dirname(path)
    if posixpath.basename(path) != "trajectory.json" or posixpath.basename(agent) != "agent":
        return None
    folder = posixpath.dirname(agent)
    marks = ("result.json", "config.json")
    if not any(fs.isfile(posixpath.join(folder, m)) for m in marks):
        return None
    return fs, folder


def read_trial(fs: Any, folder: str) -> Trial:
    """The trial's `result.json` and `config.json` (unreadable ones are named in `problems`)."""
    trial = Trial(fs, folder)
    trial.result = _read_json(fs, trial.file("result.json"), trial.problems)
    trial.config = _read_json(fs, trial.file("config.json"), trial.problems)
    if not trial.config and isinstance(trial.result.get("config"), dict):
        trial.config = trial.result["config"]
    return trial


def _job_name(trial: Trial) -> str | None:
    """The job folder's name, when the trial sits in one (it has its own config/result)."""
    job = posixpath.dirname(trial.path)
    marks = ("result.json", "config.json")
    if job and any(trial.fs.isfile(posixpath.join(job, m)) for m in marks):
        return posixpath.basename(job)
    job_id = trial.config.get("job_id")
    return str(job_id) if job_id else None


def _task(trial: Trial) -> tuple[str | None, str | None]:
    """(task id, task source): the result's task name and source, else the config's task."""
    task = _dict(trial.config.get("task"))
    name = trial.result.get("task_name") or task.get("name")
    if not name and task.get("path"):
        name = posixpath.basename(str(task["path"]).rstrip("/"))
    if not name and "__" in trial.name:  # trial folders are named `<task>__<suffix>`
        name = trial.name.rsplit("__", 1)[0]
    source = trial.result.get("source") or task.get("source") or task.get("git_url")
    return (str(name) if name else None), (str(source) if source else None)


def _reward_file(trial: Trial) -> tuple[dict[str, float] | None, str | None]:
    """Rewards from `verifier/reward.json` (flat name → number) or `verifier/reward.txt`."""
    path = trial.file("verifier", "reward.json")
    data = _read_json(trial.fs, path, trial.problems)
    numbers = {k: float(v) for k, v in data.items() if _is_number(v)}
    if numbers:
        return numbers, "verifier/reward.json"
    path = trial.file("verifier", "reward.txt")
    if not trial.fs.isfile(path):
        return None, None
    with trial.fs.open(path, "rb") as f:
        text = f.read().decode("utf-8", "replace").strip()
    try:
        return {"reward": float(text)}, "verifier/reward.txt"
    except ValueError:
        trial.problems.append(f"{path}: not a number: {text[:80]!r}")
        return None, None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def outcome(trial: Trial) -> dict[str, Any]:
    """The trial's verdict: `rewards`, `reward` (the one named 'reward', or the only one),
    `resolved` (for 0/1 rewards) and the file it came from; empty without a verdict."""
    verifier = trial.result.get("verifier_result")
    given = verifier.get("rewards") if isinstance(verifier, dict) else None
    rewards = {str(k): float(v) for k, v in (given or {}).items() if _is_number(v)} or None
    where = "result.json" if rewards else None
    if rewards is None:
        rewards, where = _reward_file(trial)
    if not rewards:
        return {}
    reward = rewards.get("reward", next(iter(rewards.values())) if len(rewards) == 1 else None)
    # Only a 0/1 reward says resolved or not; a graded one leaves `resolved` unknown.
    binary = reward is not None and reward in (0.0, 1.0)
    return {
        "rewards": rewards,
        "reward": reward,
        "resolved": bool(reward) if binary else None,
        "source_file": where,
    }


def _status(exception: Any) -> tuple[Status, str | None]:
    if not isinstance(exception, dict) or not exception.get("exception_type"):
        return "completed", None
    kind = str(exception["exception_type"])
    return ("timeout" if kind in _TIMEOUTS else "error"), kind


def _native_session(trial: Trial, session_id: Any) -> str | None:
    """The agent's own session file in the trial: Claude Code's
    `agent/sessions/projects/<cwd>/<sessionId>.jsonl` (other agents' JSONL under
    `agent/sessions/` too); the one named after the ATIF session id when there are several."""
    root = trial.file("agent", "sessions")
    if not trial.fs.isdir(root):
        return None
    # Subagent transcripts are read with their session file, never as the session.
    found = sorted(
        str(p) for p in trial.fs.glob(posixpath.join(root, "**", "*.jsonl"))
        if "/subagents/" not in str(p)
    )  # fmt: skip
    named = [
        p for p in found if isinstance(session_id, str) and session_id in posixpath.basename(p)
    ]
    chosen = named or found
    return chosen[0] if chosen else None


def is_native_session(uri: str) -> str | None:
    """The trial's `agent/trajectory.json` when `uri` is a native session inside a trial."""
    marker = "/agent/sessions/"
    if marker not in uri or not uri.endswith(".jsonl"):
        return None
    return uri.split(marker, 1)[0] + "/agent/trajectory.json"


def _attrs(trial: Trial, reward_source: str | None) -> dict[str, Any]:
    result = trial.result
    exception = result.get("exception_info")
    info: dict[str, Any] = {
        "trial_name": result.get("trial_name") or trial.name,
        "trial_id": result.get("id"),
        "job_id": trial.config.get("job_id"),
        "agent_info": result.get("agent_info"),
        "agent_result": result.get("agent_result"),
        "config_agent": trial.config.get("agent"),
        "timing": {k: result[k] for k in _TIMINGS if isinstance(result.get(k), dict)} or None,
        "reward_source": reward_source,
        "verifier_files": _verifier_files(trial),
        "problems": trial.problems or None,
    }
    if isinstance(exception, dict):
        info["exception"] = {
            "type": exception.get("exception_type"),
            "message": str(exception.get("exception_message") or "")[:_MESSAGE_LIMIT],
            "occurred_at": exception.get("occurred_at"),
        }
    return {k: v for k, v in info.items() if v is not None}


def _verifier_files(trial: Trial) -> list[str] | None:
    folder = trial.file("verifier")
    if not trial.fs.isdir(folder):
        return None
    return sorted(posixpath.basename(str(p)) for p in trial.fs.ls(folder, detail=False)) or None


def apply_trial(record: CanonicalTrajectory, trial: Trial) -> None:
    """Fill the trajectory's task, run, timing, status and outcome from its trial's files.

    What the ATIF file already says is kept; the trial's files fill what it leaves empty.
    """
    result = trial.result
    task_id, task_source = _task(trial)
    record.task_id = record.task_id or task_id
    record.task_source = record.task_source or task_source
    record.run_id = record.run_id or _job_name(trial)
    # Step times are the agent's own and carry their zone; Harbor's trial times are naive
    # (taken as UTC) and include environment setup, so they only fill what the steps leave.
    record.started_at = record.started_at or parse_time(result.get("started_at"))
    record.ended_at = record.ended_at or parse_time(result.get("finished_at"))
    if result:
        record.status, record.exit_reason = _status(result.get("exception_info"))
    verdict = outcome(trial)
    if verdict and record.reward is None and record.resolved is None:
        record.rewards, record.reward = verdict["rewards"], verdict["reward"]
        record.resolved = verdict["resolved"]
        record.outcome_source = f"harbor:{verdict['source_file']}"
    agent = _dict(trial.config.get("agent"))
    record.policy_model = record.policy_model or agent.get("model_name")
    usage = _dict(result.get("agent_result"))
    if record.cost_usd is None and _is_number(usage.get("cost_usd")):
        record.cost_usd = float(usage["cost_usd"])
    attrs = dict(record.attrs or {})
    attrs["harbor"] = _attrs(trial, verdict.get("source_file"))
    session = _native_session(trial, attrs.get("session_id"))
    if session is not None:
        attrs["harbor"]["native_session"] = compare_native(record, trial, session)
    record.attrs = attrs


def _sums(messages: list[Any]) -> dict[str, int]:
    keys = ("prompt_tokens", "completion_tokens", "cached_tokens")
    out = {k: sum(getattr(m, k) or 0 for m in messages) for k in keys}
    out["cache_creation_tokens"] = sum(
        int((m.attrs or {}).get("cache_creation_input_tokens") or 0) for m in messages
    )
    return out


def compare_native(record: CanonicalTrajectory, trial: Trial, path: str) -> dict[str, Any]:
    """The native session's token totals beside the ATIF ones, whether they agree, and why not.

    Harbor's converter counts a message's usage from its first streamed line and its prompt as
    input + cache reads; the session's own reading takes each message's last line and counts
    cache writes in the prompt too. Threads from separate subagent files are left out (Harbor
    reads only the session file).
    """
    from trajlake.errors import FormatDetectionError
    from trajlake.ingest._adapter import ParsedTrajectory
    from trajlake.ingest._registry import detect
    from trajlake.ingest._sources import SourceFile

    uri = trial.fs.unstrip_protocol(path) if "://" not in trial.path else path
    source = SourceFile(uri.removeprefix("file://"), trial.fs.size(path))
    try:
        adapter = detect(source)
    except FormatDetectionError as e:
        return {"uri": source.uri, "agrees": False, "why": f"not read: {e}"}
    with trial.fs.open(path, "rb") as stream:
        parsed = [p for p in adapter.read(source, stream) if isinstance(p, ParsedTrajectory)]
    if not parsed:
        return {"uri": source.uri, "agrees": False, "why": "the session file has no trajectory"}
    native = parsed[-1].record  # an adapter yields a file's bad lines before its trajectory
    own = [m for m in native.messages if not m.thread.startswith("agent-")]
    theirs, ours = _sums(own), _sums(record.messages)
    session_id = (native.attrs or {}).get("rollout_key")
    why, real = _differences(ours, theirs)
    if session_id != (record.attrs or {}).get("session_id"):
        why.insert(0, f"session ids differ ({session_id!r})")
        real = True
    return {
        "uri": source.uri,
        "format": adapter.name,
        "session_id": session_id,
        "trajectory_id": native.trajectory_id,
        **{f"native_{k}": v for k, v in theirs.items()},
        **{f"atif_{k}": ours[k] for k in ("prompt_tokens", "completion_tokens", "cached_tokens")},
        # Agreeing totals may still differ by the cache-write convention, which `why` notes.
        "agrees": not real,
        "why": "; ".join(why) or None,
    }


def _differences(atif: Mapping[str, int], native: Mapping[str, int]) -> tuple[list[str], bool]:
    """What differs, in words, and whether anything differs beyond the cache-write convention."""
    why, real = [], False
    writes = native["cache_creation_tokens"]
    gap = native["prompt_tokens"] - atif["prompt_tokens"]
    if gap and gap == writes:
        why.append(f"prompt: the session counts {writes} cache-write tokens, ATIF does not")
    elif gap:
        why.append(f"prompt: {native['prompt_tokens']} in the session, {atif['prompt_tokens']} "
                   f"in ATIF ({writes} cache-write tokens explain part of it)")  # fmt: skip
        real = True
    if atif["completion_tokens"] != native["completion_tokens"]:
        why.append(
            f"completion: {native['completion_tokens']} in the session (last streamed line of "
            f"each message), {atif['completion_tokens']} in ATIF (first line)"
        )
        real = True
    if atif["cached_tokens"] != native["cached_tokens"]:
        why.append(f"cache reads: {native['cached_tokens']} vs {atif['cached_tokens']} in ATIF")
        real = True
    return why, real


def is_trial_result(data: Any) -> bool:
    """Whether a parsed JSON document is a Harbor trial's `result.json` (`TrialResult`)."""
    if not isinstance(data, dict) or not isinstance(data.get("trial_name"), str):
        return False
    return "verifier_result" in data or ("task_name" in data and "agent_info" in data)


def label_rows(uri: str, data: dict[str, Any], run_id: str | None) -> list[dict[str, Any]]:
    """The label row of a trial's `result.json` (rewards, else the verifier's reward file).

    It names the trial's ATIF trajectory by id when `agent/trajectory.json` has a session id,
    else the task and run (the job folder) with the trial's name in `details`. A trial without
    a verdict gives no row; one that failed gives its exception type in `details`.
    """
    fs, path = fsspec.core.url_to_fs(uri)
    trial = Trial(fs, posixpath.dirname(path), result=data)
    trial.config = _dict(data.get("config"))
    verdict = outcome(trial)
    if not verdict:
        return []
    task_id, _ = _task(trial)
    exception = _dict(data.get("exception_info"))
    details = {
        "trial_name": data.get("trial_name"),
        "trial_id": data.get("id"),
        "reward_file": verdict["source_file"],
        "exception_type": exception.get("exception_type"),
        "verifier_files": _verifier_files(trial),
    }
    return [
        {
            "trajectory_id": _trajectory_id(trial),
            "task_id": task_id,
            "run_id": run_id if run_id is not None else _job_name(trial),
            "resolved": verdict["resolved"],
            "reward": verdict["reward"],
            "rewards": verdict["rewards"],
            "details": {k: v for k, v in details.items() if v is not None},
        }
    ]


def _trajectory_id(trial: Trial) -> str | None:
    """The id the ATIF adapter gives the trial's trajectory (from its session id), if any."""
    from trajlake.ingest._adapter import stable_id

    problems: list[str] = []
    doc = _read_json(trial.fs, trial.file("agent", "trajectory.json"), problems)
    session = doc.get("session_id")
    return stable_id("atif", session) if isinstance(session, str) and session else None
