"""Value and reranking models: datasets from the lake, the CPU feature baseline, evaluation."""

from trajlake.value.baseline import (
    NUMERIC_FEATURES,
    BaselineMetrics,
    FeatureBaseline,
    evaluate_baseline,
    evaluate_model,
    trajectory_features,
)
from trajlake.value.dataset import ValueExample, balance, load_examples, split_by_task
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
    "NUMERIC_FEATURES",
    "BaselineMetrics",
    "FeatureBaseline",
    "ReliabilityBin",
    "RerankAtK",
    "RerankMetrics",
    "ValueExample",
    "auroc",
    "auroc_per_task",
    "balance",
    "best_at_k",
    "bootstrap_ci",
    "brier",
    "ece",
    "evaluate_baseline",
    "evaluate_model",
    "gap_closed",
    "load_examples",
    "pass_at_k",
    "random_at_k",
    "reliability_bins",
    "rerank_report",
    "split_by_task",
    "trajectory_features",
]
