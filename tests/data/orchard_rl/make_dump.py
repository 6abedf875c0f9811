"""Builds `dump/` and `broken/`: synthetic Orchard-style RL rollouts (see README.md).

Token ids come from a stand-in tokenizer (`synthetic-whitespace-hash`: each whitespace-split
word of a rendered message is one id, a hash of the word), so the files are small and the
ids are reproducible; the loss mask is 1 on assistant tokens and 0 on everything else, as an
RL trainer writes it. Run from the repository root: `python tests/data/orchard_rl/make_dump.py`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
TASK = "astropy__astropy-12907"
MODEL = "orchard-swe-sft-30b"
SUBMIT = "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"
PATCH = (
    "diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py\n"
    "--- a/astropy/modeling/separable.py\n+++ b/astropy/modeling/separable.py\n"
    "@@ -242 +242 @@\n-        cright[-right.shape[0]:, -right.shape[1]:] = 1\n"
    "+        cright[-right.shape[0]:, -right.shape[1]:] = right\n"
)
SYSTEM = {
    "role": "system",
    "content": "You are a software engineer. Fix the issue in the repository at /testbed. "
    "Run one bash command per turn.",
}
USER = {
    "role": "user",
    "content": f"<issue>{TASK}: separability_matrix does not compute separability correctly "
    "for nested CompoundModels</issue> Submit with `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`.",
}


def _tokens(text: str) -> list[int]:
    return [10 + int(hashlib.sha256(w.encode()).hexdigest()[:6], 16) % 50000 for w in text.split()]


def _render(m: dict[str, Any]) -> str:
    body = m.get("content") or ""
    for c in m.get("tool_calls") or []:
        body += " " + c["function"]["name"] + " " + c["function"]["arguments"]
    return f"<|im_start|>{m['role']} {body} <|im_end|>"


def _rollout(messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    prompt = [t for m in messages[:first] for t in _tokens(_render(m))]
    response: list[int] = []
    mask: list[int] = []
    for m in messages[first:]:
        ids = _tokens(_render(m))
        response += ids
        mask += [1 if m["role"] == "assistant" else 0] * len(ids)
    head = {k: v for k, v in fields.items() if k in ("instance_id", "rollout_id", "model")}
    tail = {k: v for k, v in fields.items() if k not in head}
    return {
        **head,
        "messages": messages,
        "prompt_token_ids": prompt,
        "response_token_ids": response,
        "loss_mask": mask,
        **tail,
    }


def _bash(i: int | str, command: str, text: str = "Let me look.") -> dict[str, Any]:
    call = {"name": "bash", "arguments": json.dumps({"command": command})}
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [{"id": f"call_{i}", "type": "function", "function": call}],
    }


def _result(i: int | str, output: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{i}", "content": output}


def rollouts() -> dict[str, dict[str, Any]]:
    """File name → rollout object."""
    base = {"instance_id": TASK, "model": MODEL}
    fix = "sed -i '242s/= 1$/= right/' astropy/modeling/separable.py && git diff"
    r0 = _rollout(
        [SYSTEM, USER, _bash(0, "grep -n 'cright' astropy/modeling/separable.py"),
         _result(0, "242:        cright[-right.shape[0]:, -right.shape[1]:] = 1"),
         _bash(1, fix), _result(1, PATCH), {"role": "assistant", "content": f"Fixed.\n{SUBMIT}"}],
        **base, rollout_id=f"{TASK}-r0", tokenizer="synthetic-whitespace-hash",
        model_patch=PATCH, exit_status="Submitted",
    )  # fmt: skip
    r1 = _rollout(
        [SYSTEM, USER, _bash(0, "ls astropy/modeling"), _result(0, "core.py\nseparable.py"),
         _bash(1, "python -m pytest astropy/modeling/tests/test_separable.py -x -q"),
         _result(1, "1 failed, 14 passed")],
        **base, rollout_id=f"{TASK}-r1", model_patch="", exit_status="LimitsExceeded",
    )  # fmt: skip
    # No rollout id (rewards.json keys it by file stem); two parallel calls answered by one
    # context block of two tool messages.
    both = _bash("a", "wc -l astropy/modeling/separable.py", "Check both.")
    both["tool_calls"].append(_bash("b", "git status --short")["tool_calls"][0])
    r2 = _rollout(
        [SYSTEM, USER, both, _result("a", "317 astropy/modeling/separable.py"), _result("b", ""),
         {"role": "assistant", "content": f"Nothing to change.\n{SUBMIT}"}],
        **base, model_patch="", exit_status="Submitted",
        metadata={"sampler": {"temperature": 1.0, "top_p": 1.0}},
    )  # fmt: skip
    # In no rewards file and without a reward of its own: stored without outcome, reported.
    r3 = _rollout(
        [SYSTEM, USER, _bash(0, "head -3 setup.cfg"), _result(0, "[metadata]\nname = astropy"),
         {"role": "assistant", "content": SUBMIT}],
        **base, rollout_id=f"{TASK}-r3", model_patch="", exit_status="Submitted",
    )  # fmt: skip
    # Its own reward; two assistant messages in a row (one generated run covers both), so
    # the token ids cannot be split per message and are kept whole.
    r4 = _rollout(
        [SYSTEM, USER, {"role": "assistant", "content": "I will edit the file"}, _bash(0, fix),
         _result(0, PATCH), {"role": "assistant", "content": SUBMIT}],
        **base, rollout_id=f"{TASK}-r4", model_patch=PATCH, exit_status="Submitted", reward=1.0,
    )  # fmt: skip
    return {f"rollout_0{i}.json": r for i, r in enumerate([r0, r1, r2, r3, r4])}


def _write(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n")


def main() -> None:
    """Write the fixture files."""
    files = rollouts()
    for name, rollout in files.items():
        _write(HERE / "dump" / name, rollout)
    rewards = {
        f"{TASK}-r0": 1.0,
        f"{TASK}-r1": -1.0,
        "rollout_02": {"reward": -1, "resolved": False},
    }
    _write(HERE / "dump" / "rewards.json", rewards)
    bad = {**files["rollout_01.json"], "rollout_id": f"{TASK}-r9"}
    bad["loss_mask"] = bad["loss_mask"][:-2]  # two response tokens without a mask value
    _write(HERE / "broken" / "bad_mask.json", bad)
    _write(HERE / "broken" / "rewards.json", {f"{TASK}-r9": 0.0})


if __name__ == "__main__":
    main()
