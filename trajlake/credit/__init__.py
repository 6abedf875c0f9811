"""Credit assignment: per-turn values, credits, segments and loss weights, stored as data."""

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
from trajlake.credit.hindsight import HindsightValues
from trajlake.credit.masks import (
    MASK_RULES,
    TurnMasks,
    advantage_weights,
    all_turns,
    first_error,
    rise,
    step_reject,
)
from trajlake.credit.progress import ProgressValues
from trajlake.credit.runs import CreditRunReport, diagnostics, list_credit_runs, run_credit
from trajlake.credit.turns import TURNS_VIEW_SQL, load_turns
from trajlake.credit.values import (
    VALUE_SOURCES,
    AdvantageSource,
    GroupValues,
    OutcomeValues,
    PrefixMCValues,
    action_key,
    value_source,
)

__all__ = [
    "MASK_RULES",
    "TURNS_VIEW_SQL",
    "VALUE_SOURCES",
    "AdvantageSource",
    "AnchoredValues",
    "CreditRunReport",
    "CrossFitTextValues",
    "EnsembleValues",
    "GroupValues",
    "HindsightValues",
    "OutcomeValues",
    "PrefixMCValues",
    "ProgressValues",
    "TrajectoryTurns",
    "Turn",
    "TurnMasks",
    "ValueSource",
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
    "rise",
    "run_credit",
    "step_reject",
    "td_credits",
    "td_errors",
    "value_source",
]
