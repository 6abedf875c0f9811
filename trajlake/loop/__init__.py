"""The generation loop on the synthetic environment: gen-0 → lake → credit → SFT and a value
model → gen-1 with lineage, measured with SQL over the lake (what `trajlake demo` runs)."""

from trajlake.loop._report import SUCCESS_SQL, LoopReport, PolicyResult, success_rates
from trajlake.loop._run import DEFAULT_SIZES, QUICK_SIZES, REPORT_DIR, LoopSizes, run_loop

__all__ = [
    "DEFAULT_SIZES",
    "QUICK_SIZES",
    "REPORT_DIR",
    "SUCCESS_SQL",
    "LoopReport",
    "LoopSizes",
    "PolicyResult",
    "run_loop",
    "success_rates",
]
