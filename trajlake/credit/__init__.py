"""Credit assignment: per-turn values, credits, segments and loss weights, stored as data.

Value sources are looked up by name in one registry (`trajlake.credit.registry`); importing this
package registers credit's own sources (`trajlake.credit.values`). Sources that need torch live
in `trajlake.value` and register through the `trajlake.value_sources` entry points.
"""

from trajlake.credit._types import TrajectoryTurns, Turn, ValueSource
from trajlake.credit.anchored import AnchoredValues
from trajlake.credit.crossfit import CrossFitTextValues
from trajlake.credit.ensemble import EnsembleValues
from trajlake.credit.estimators import (
    gae,
    mc_returns,
    n_step_advantages,
    n_step_returns,
    td_credits,
    td_errors,
)
from trajlake.credit.masks import (
    MASK_RULES,
    TurnMasks,
    advantage_weights,
    all_turns,
    first_error,
    rise,
    step_reject,
)
from trajlake.credit.prefix_mc import PrefixMCValues, action_key
from trajlake.credit.progress import ProgressValues
from trajlake.credit.registry import (
    ValueSourceSpec,
    register_value_source,
    value_source,
    value_source_names,
    value_source_spec,
)
from trajlake.credit.runs import CreditRunReport, diagnostics, list_credit_runs, run_credit
from trajlake.credit.turns import TURNS_VIEW_SQL, load_turns
from trajlake.credit.value_model import PrefixModelValues
from trajlake.credit.values import AdvantageSource, GroupValues, OutcomeValues

__all__ = [
    "MASK_RULES",
    "TURNS_VIEW_SQL",
    "AdvantageSource",
    "AnchoredValues",
    "CreditRunReport",
    "CrossFitTextValues",
    "EnsembleValues",
    "GroupValues",
    "OutcomeValues",
    "PrefixMCValues",
    "PrefixModelValues",
    "ProgressValues",
    "TrajectoryTurns",
    "Turn",
    "TurnMasks",
    "ValueSource",
    "ValueSourceSpec",
    "action_key",
    "advantage_weights",
    "all_turns",
    "diagnostics",
    "first_error",
    "gae",
    "list_credit_runs",
    "load_turns",
    "mc_returns",
    "n_step_advantages",
    "n_step_returns",
    "register_value_source",
    "rise",
    "run_credit",
    "step_reject",
    "td_credits",
    "td_errors",
    "value_source",
    "value_source_names",
    "value_source_spec",
]
