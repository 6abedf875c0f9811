"""A second synthetic environment with exact ground truth: multi-bug debugging.

Dynamics differ from `trajlake.synth`: several bugs per task (the visible tests cover only the
one in the issue, so they can pass before the fix is complete), long exploration to locate bugs,
and edits that break a shared helper until a later restore. `generate(DebugConfig(...))` gives
canonical trajectories (OpenAI chat with tool calls) and, per trajectory, the exact values
V*(s_0) … V*(s_T) and credits c*_t = V*(s_{t+1}) − V*(s_t) under the behaviour policy.
"""

from trajlake.synth_debug._dynamics import (
    ACTIONS,
    OBSERVATIONS,
    START,
    Action,
    DebugDynamics,
    State,
    exact_values,
    observe,
    simulate,
    states,
)
from trajlake.synth_debug._generate import (
    HARNESS,
    DebugBatch,
    DebugConfig,
    DebugTask,
    exact_success,
    generate,
    make_task,
    rollout_setup,
)
from trajlake.synth_debug._policy import DebugPolicy

__all__ = [
    "ACTIONS",
    "HARNESS",
    "OBSERVATIONS",
    "START",
    "Action",
    "DebugBatch",
    "DebugConfig",
    "DebugDynamics",
    "DebugPolicy",
    "DebugTask",
    "State",
    "exact_success",
    "exact_values",
    "generate",
    "make_task",
    "observe",
    "rollout_setup",
    "simulate",
    "states",
]
