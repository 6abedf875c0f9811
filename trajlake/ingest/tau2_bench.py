"""τ²-bench simulations: `simulations/<id>.json` (one SimulationRun) or a results file's list.

A simulation carries `messages` (half-duplex text mode) and, in full-duplex voice mode, `ticks`:
per 200 ms tick an agent chunk and a user chunk (with `contains_speech`), tool calls and results.
Ticks are folded into utterances: consecutive speaking ticks of one party are one message (content
joined from the chunks; None when the transcript was stripped, as in the published test data).
The verdict is `reward_info.reward`, present only when the run was evaluated. Run information
(agent model, domain, git commit) comes from the results file: the same document, or the
`results.json` beside a `simulations/` folder.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from typing import IO, Any, ClassVar

from trajlake.ingest._adapter import (
    BadRecord,
    Parsed,
    parse_document,
    raw_json,
    stable_id,
    to_parsed,
)
from trajlake.ingest._sources import SourceFile
from trajlake.ingest._tau2_bench_parts import messages_from_list, messages_from_ticks
from trajlake.schema import Status
from trajlake.wire.values import as_number, drop_none, mapping, parse_time

_RESULTS_LIMIT = 16 << 20
"""Largest sibling `results.json` read for run info (big ones hold every simulation again)."""
_SIMULATION_HEAD = re.compile(rb'^\s*\{\s*"(id|task_id)"\s*:')
_STATUS: dict[str, Status] = {
    "user_stop": "completed",
    "agent_stop": "completed",
    "max_steps": "truncated",
    "too_many_errors": "error",
    "agent_error": "error",
    "user_error": "error",
    "infrastructure_error": "error",
}


def _is_results(obj: Mapping[str, Any]) -> bool:
    info = obj.get("info")
    return isinstance(info, Mapping) and "agent_info" in info and "tasks" in obj


class Tau2BenchAdapter:
    """Reads τ²-bench simulation runs: one trajectory per simulation."""

    name: ClassVar[str] = "tau2-bench"
    description: ClassVar[str] = (
        "*.json — τ²-bench simulation (simulations/<id>.json) or results file with `simulations`"
    )

    def sniff(self, source: SourceFile, head: bytes) -> float:
        """Sure for a SimulationRun object, or a results file that holds simulations."""
        if _SIMULATION_HEAD.match(head):
            keys = (b'"termination_reason"', b'"start_time"', b'"end_time"', b'"duration"')
            body = (b'"ticks"', b'"messages"')
            if all(k in head for k in keys) and any(k in head for k in body):
                return 1.0
            return 0.0
        if not (head.lstrip().startswith(b"{") and b'"agent_info"' in head):
            return 0.0
        if b'"git_commit"' not in head or b'"user_info"' not in head:
            return 0.0
        complete = source.size is not None and len(head) >= source.size
        if not complete:
            # The simulations list follows the tasks, often beyond the head.
            return 0.9 if b'"environment_info"' in head else 0.0
        try:
            obj = json.loads(head)
        except ValueError:
            return 0.0
        sims = obj.get("simulations") if isinstance(obj, dict) else None
        # A run's `results.json` without simulations (voice runs keep them apart) is no trajectory.
        return 1.0 if isinstance(sims, list) and sims else 0.0

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """A simulation file gives one trajectory; a results file one per simulation."""
        document = parse_document(stream.read())
        if isinstance(document, BadRecord):
            yield document
            return
        if not isinstance(document, dict):
            yield BadRecord(f"expected a JSON object, got {type(document).__name__}", None, 0)
            return
        if _is_results(document):
            info = mapping(document.get("info"))
            sims = document.get("simulations")
            for index, sim in enumerate(sims if isinstance(sims, list) else ()):
                yield _parsed(sim, info, index)
            return
        yield _parsed(document, _sibling_info(source), None)


def _sibling_info(source: SourceFile) -> Mapping[str, Any]:
    """Run `info` of the `results.json` next to a `simulations/` folder, when there is one."""
    parent, _, _ = source.uri.rstrip("/").rpartition("/")
    folder, _, base = parent.rpartition("/")
    if base != "simulations" or not folder:
        return {}
    results = SourceFile(f"{folder}/results.json", None, source.storage_options)
    try:
        with results.open() as stream:
            data = stream.read(_RESULTS_LIMIT + 1)
    except (OSError, ValueError):
        return {}
    if len(data) > _RESULTS_LIMIT:
        return {}
    document = parse_document(data)
    if not isinstance(document, dict) or not _is_results(document):
        return {}
    return mapping(document.get("info"))


def _parsed(sim: Any, info: Mapping[str, Any], index: int | None) -> Parsed:
    build = functools.partial(_record, sim, info)
    return to_parsed(build, offset=index, raw=functools.partial(raw_json, sim))


def _outcome(reward_info: Mapping[str, Any]) -> dict[str, Any]:
    reward = as_number(reward_info.get("reward"))
    if reward is None:
        return {}
    breakdown = mapping(reward_info.get("reward_breakdown"))
    rewards = {str(k): v for k, v in breakdown.items() if as_number(v) is not None}
    return {
        "reward": reward,
        # τ²-bench counts a simulation as successful when its reward is 1 (pass^k).
        "resolved": abs(reward - 1.0) < 1e-6,
        "rewards": {k: float(v) for k, v in rewards.items()} or None,
        "outcome_source": "tau2-bench:reward_info",
    }


def _run_fields(info: Mapping[str, Any]) -> dict[str, Any]:
    agent = mapping(info.get("agent_info"))
    user = mapping(info.get("user_info"))
    audio = mapping(info.get("audio_native_config"))
    domain = mapping(info.get("environment_info")).get("domain_name")
    return {
        "domain": domain if isinstance(domain, str) else None,
        "policy_model": agent.get("llm") or audio.get("model"),
        "harness_version": info.get("git_commit"),
        "attrs": {
            "agent_implementation": agent.get("implementation"),
            "user_implementation": user.get("implementation"),
            "user_model": user.get("llm"),
        },
    }


def _record(sim: Any, info: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(sim, dict):
        raise TypeError(f"expected a simulation object, got {type(sim).__name__}")
    sim_id = sim.get("id")
    if not isinstance(sim_id, str) or not sim_id:
        raise ValueError("field 'id': a simulation needs its id")
    raw_messages, ticks = sim.get("messages"), sim.get("ticks")
    if isinstance(raw_messages, list) and raw_messages:
        messages = messages_from_list(raw_messages)
    elif isinstance(ticks, list):
        messages = messages_from_ticks(ticks)
    else:
        raise ValueError("field 'messages': a simulation needs messages or ticks")
    run = _run_fields(info)
    raw_task = sim.get("task_id")
    task_id, domain = (str(raw_task) if raw_task is not None else None), run["domain"]
    reason = sim.get("termination_reason")
    attrs = {
        **run["attrs"],
        "simulation_id": sim_id,
        "tau2_task_id": raw_task,
        "trial": sim.get("trial"),
        "seed": sim.get("seed"),
        "mode": sim.get("mode"),
        "duration_s": sim.get("duration"),
        "n_ticks": len(ticks) if isinstance(ticks, list) else None,
        "user_cost": sim.get("user_cost"),
        "reward_info": sim.get("reward_info") or None,
        "info": sim.get("info") or None,
    }
    return drop_none(
        {
            "trajectory_id": stable_id("tau2-bench", sim_id),
            "task_id": f"{domain}/{task_id}" if domain and task_id is not None else task_id,
            "task_source": f"tau2-bench/{domain}" if domain else "tau2-bench",
            "harness": "tau2-bench",
            "harness_version": run["harness_version"],
            "policy_model": run["policy_model"],
            "attempt": sim.get("trial") if isinstance(sim.get("trial"), int) else None,
            "started_at": parse_time(sim.get("start_time")),
            "ended_at": parse_time(sim.get("end_time")),
            "status": _STATUS.get(reason) if isinstance(reason, str) else None,
            "exit_reason": reason if isinstance(reason, str) else None,
            "cost_usd": as_number(sim.get("agent_cost")),
            **_outcome(mapping(sim.get("reward_info"))),
            "attrs": drop_none(attrs),
            "messages": messages,
        }
    )
