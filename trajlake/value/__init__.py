"""Value and reranking models: datasets from the lake, serializers, recipes, training, the CPU
feature baseline, evaluation and reports. Nothing here imports torch until a neural model is
built, trained or loaded."""

from trajlake.value.artifacts import SavedModel, load_model
from trajlake.value.baseline import (
    NUMERIC_FEATURES,
    BaselineMetrics,
    FeatureBaseline,
    evaluate_baseline,
    evaluate_model,
    trajectory_features,
)
from trajlake.value.card import ModelCard, read_card
from trajlake.value.dataset import ValueExample, balance, load_examples, split_by_task
from trajlake.value.evaluate import Evaluation, evaluate_saved_model
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
from trajlake.value.recipe import Recipe, load_recipe, parse_recipe
from trajlake.value.report import comparison_table, evaluation_report, write_report
from trajlake.value.scoring import rerank_lake, score_to_lake
from trajlake.value.serialize import Conversation, Serializer, as_conversation, serialize
from trajlake.value.train import TrainedModel, train_value_model

__all__ = [
    "NUMERIC_FEATURES",
    "BaselineMetrics",
    "Conversation",
    "Evaluation",
    "FeatureBaseline",
    "ModelCard",
    "Recipe",
    "ReliabilityBin",
    "RerankAtK",
    "RerankMetrics",
    "SavedModel",
    "Serializer",
    "TrainedModel",
    "ValueExample",
    "as_conversation",
    "auroc",
    "auroc_per_task",
    "balance",
    "best_at_k",
    "bootstrap_ci",
    "brier",
    "comparison_table",
    "ece",
    "evaluate_baseline",
    "evaluate_model",
    "evaluate_saved_model",
    "evaluation_report",
    "gap_closed",
    "load_examples",
    "load_model",
    "load_recipe",
    "parse_recipe",
    "pass_at_k",
    "random_at_k",
    "read_card",
    "reliability_bins",
    "rerank_lake",
    "rerank_report",
    "score_to_lake",
    "serialize",
    "split_by_task",
    "train_value_model",
    "trajectory_features",
    "write_report",
]
