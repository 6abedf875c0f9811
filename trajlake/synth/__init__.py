"""A synthetic bug-fixing environment with ground truth: exact V*(s_t), true credit, a policy.

`generate(SynthConfig(...), PolicyParams.default())` gives canonical trajectories (OpenAI chat
format with tool calls, ready for `lake.write` or JSONL ingest) and, per trajectory, the true
values V*(s_0) … V*(s_T) and credits. `PolicyParams.fit` does behaviour cloning on
(observation, action, weight) examples read back with `turn_examples` / `synth_turns`.
"""

from trajlake.synth._generate import (
    HARNESS,
    SynthBatch,
    SynthConfig,
    SynthTask,
    exact_success,
    generate,
    make_task,
    success_rate,
    synth_turns,
    turn_examples,
)
from trajlake.synth._model import ACTIONS, OBSERVATIONS, Action, PolicyParams, TaskDynamics

__all__ = [
    "ACTIONS",
    "HARNESS",
    "OBSERVATIONS",
    "Action",
    "PolicyParams",
    "SynthBatch",
    "SynthConfig",
    "SynthTask",
    "TaskDynamics",
    "exact_success",
    "generate",
    "make_task",
    "success_rate",
    "synth_turns",
    "turn_examples",
]
