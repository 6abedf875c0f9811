"""Value and reranking models: pure-numpy evaluation metrics (Best@k, Pass@k, AUROC, ECE)."""

from trajlake.value.metrics import (
    ReliabilityBin,
    RerankAtK,
    RerankMetrics,
    auroc,
    auroc_per_task,
    best_at_k,
    bootstrap_ci,
    brier,
    ece,
    gap_closed,
    pass_at_k,
    random_at_k,
    reliability_bins,
    rerank_report,
)

__all__ = [
    "ReliabilityBin",
    "RerankAtK",
    "RerankMetrics",
    "auroc",
    "auroc_per_task",
    "best_at_k",
    "bootstrap_ci",
    "brier",
    "ece",
    "gap_closed",
    "pass_at_k",
    "random_at_k",
    "reliability_bins",
    "rerank_report",
]
