"""The generation loop on the synthetic environment: gen-0 → lake → credit → SFT and a value
model → gen-1 with lineage, measured with SQL over the lake (what `trajlake demo` runs), and
the loop over several seeds with intervals (`trajlake demo --seeds`)."""

from trajlake.loop._report import SUCCESS_SQL, LoopReport, PolicyResult, success_rates
from trajlake.loop._run import DEFAULT_SIZES, QUICK_SIZES, REPORT_DIR, LoopSizes, run_loop
from trajlake.loop._seeds import (
    Interval,
    SeedsReport,
    SeedsRow,
    mean_interval,
    parse_seeds,
    run_seeds,
    seeds_table,
    summarize,
)
from trajlake.loop._value_model import VALUE_MODELS, ValueModelChoice, choose_value_model

__all__ = [
    "DEFAULT_SIZES",
    "QUICK_SIZES",
    "REPORT_DIR",
    "SUCCESS_SQL",
    "VALUE_MODELS",
    "Interval",
    "LoopReport",
    "LoopSizes",
    "PolicyResult",
    "SeedsReport",
    "SeedsRow",
    "ValueModelChoice",
    "choose_value_model",
    "mean_interval",
    "parse_seeds",
    "run_loop",
    "run_seeds",
    "seeds_table",
    "success_rates",
    "summarize",
]
