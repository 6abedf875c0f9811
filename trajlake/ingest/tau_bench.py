"""τ-bench historical trajectories: a JSON array of `{task_id, trial, reward, info, traj}`.

`traj` is an OpenAI chat message list (system policy, simulated user, assistant with tool
calls, tool results). The verdict is `reward` (resolved when it is 1.0); `info.reward_info`,
the user simulator's task and cost go to `attrs`. The environment (airline, retail, …) and the
model tag come from the file name (`<model>-<env>.json`, as in the τ-bench repository).

The file is one JSON document and is read whole (the published files are a few MB; there is no
streaming JSON parser among the dependencies).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from typing import IO, Any, ClassVar

from trajlake.ingest._adapter import (
    BadRecord,
    Parsed,
    raw_json,
    read_document,
    stable_id,
    to_parsed,
)
from trajlake.ingest._sources import SourceFile
from trajlake.wire.chat import chat_message
from trajlake.wire.values import as_number, drop_none, mapping

_ENVIRONMENTS = ("airline", "retail", "telecom", "mock")
_HEAD = re.compile(rb'^\s*\[\s*\{\s*"(task_id|reward|trial|info|traj)"\s*:')
_NAME = re.compile(r"^(?P<model>.+?)-(?P<env>" + "|".join(_ENVIRONMENTS) + r")\.json$")


def _from_name(source: SourceFile) -> tuple[str | None, str | None]:
    """(model tag, environment) from a `<model>-<env>.json` file name."""
    match = _NAME.match(source.name)
    if match:
        return match["model"], match["env"]
    env = next((e for e in _ENVIRONMENTS if e in source.name.lower()), None)
    return None, env


class TauBenchAdapter:
    """Reads a τ-bench results array: one trajectory per task × trial."""

    name: ClassVar[str] = "tau-bench"
    description: ClassVar[str] = (
        "*.json — τ-bench results / historical_trajectories (array of {task_id, trial, "
        "reward, info, traj})"
    )

    def sniff(self, source: SourceFile, head: bytes) -> float:
        """Sure when the file is an array whose first object has τ-bench's keys."""
        if not _HEAD.match(head):
            return 0.0
        keys = sum(k in head for k in (b'"task_id"', b'"traj"', b'"reward_info"', b'"trial"'))
        return 1.0 if keys >= 3 else 0.6

    def read(self, source: SourceFile, stream: IO[bytes]) -> Iterator[Parsed]:
        """One trajectory per array element; `offset` is the element's index."""
        document = read_document(stream)
        if isinstance(document, BadRecord):
            yield document
            return
        if not isinstance(document, list):
            yield BadRecord(f"expected a JSON array, got {type(document).__name__}", None, 0)
            return
        model, env = _from_name(source)
        for index, item in enumerate(document):
            build = functools.partial(_record, item, model, env)
            yield to_parsed(build, offset=index, raw=functools.partial(raw_json, item))


def _rewards(reward_info: Mapping[str, Any]) -> dict[str, float] | None:
    """The named components of `reward_info.info` (r_actions, r_outputs …) that are numbers."""
    info = reward_info.get("info")
    if not isinstance(info, Mapping):
        return None
    named = {k: as_number(v) for k, v in info.items()}
    return {k: v for k, v in named.items() if v is not None} or None


def _record(item: Any, model: str | None, env: str | None) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise TypeError(f"expected a JSON object, got {type(item).__name__}")
    traj = item.get("traj")
    if not isinstance(traj, list):
        raise ValueError("field 'traj': expected a list of chat messages")
    info = mapping(item.get("info"))
    task = mapping(info.get("task"))
    reward_info = mapping(info.get("reward_info"))
    reward = as_number(item.get("reward"))
    task_id = item.get("task_id")
    trial = item.get("trial")
    # task × trial repeat across models (one file each): the conversation itself tells them apart.
    digest = hashlib.sha256(
        json.dumps(traj, sort_keys=True, ensure_ascii=False).encode()
    ).hexdigest()
    attrs = {
        "tau_task_id": task_id,
        "trial": trial,
        "user_id": task.get("user_id"),
        "instruction": task.get("instruction"),
        "expected_actions": task.get("actions"),
        "expected_outputs": task.get("outputs"),
        "user_source": info.get("source"),
        "user_cost": info.get("user_cost"),
        "reward_info": reward_info or None,
        "model_tag": model,
    }
    return drop_none(
        {
            "trajectory_id": stable_id("tau-bench", env, task_id, trial, digest),
            "task_id": f"{env}/{task_id}"
            if env
            else (str(task_id) if task_id is not None else None),
            "task_source": f"tau-bench/{env}" if env else "tau-bench",
            "harness": "tau-bench",
            "policy_model": model,
            "attempt": trial if isinstance(trial, int) else None,
            "resolved": (reward == 1.0) if reward is not None else None,
            "reward": reward,
            "rewards": _rewards(reward_info),
            "outcome_source": "tau-bench:reward" if reward is not None else None,
            "attrs": drop_none(attrs),
            "messages": [chat_message(m) for m in traj],
        }
    )
