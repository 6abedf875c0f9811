"""Value and reranking models: train one from a recipe, load it, evaluate it, report on it.

The names here are what a user calls; the parts behind them (serializers, datasets, losses, the
`ValueTrainer` and its `ValueTrainingArguments`) are imported from their modules. Names load on
first use, so importing one inference module (`trajlake.serve` loads `trajlake.value.scorer`)
never pulls in training code, and nothing here imports torch until a neural model is built,
trained or loaded (`trajlake.value.trainer`, which needs it, is not re-exported).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajlake._lazy import lazy_exports

if TYPE_CHECKING:
    from trajlake.value.artifacts import SavedModel, load_model
    from trajlake.value.baseline import FeatureBaseline
    from trajlake.value.dataset import load_examples, split_by_task
    from trajlake.value.evaluate import Evaluation, evaluate_saved_model
    from trajlake.value.metrics import (
        auroc,
        best_at_k,
        bootstrap_ci,
        brier,
        ece,
        gap_closed,
        pass_at_k,
        random_at_k,
        rerank_report,
    )
    from trajlake.value.recipe import Recipe, load_recipe
    from trajlake.value.report import comparison_table, evaluation_report, write_report
    from trajlake.value.train import TrainedModel, train_value_model

_LAZY = {
    **dict.fromkeys(["SavedModel", "load_model"], "trajlake.value.artifacts"),
    "FeatureBaseline": "trajlake.value.baseline",
    **dict.fromkeys(["load_examples", "split_by_task"], "trajlake.value.dataset"),
    **dict.fromkeys(["Evaluation", "evaluate_saved_model"], "trajlake.value.evaluate"),
    **dict.fromkeys(
        [
            "auroc",
            "best_at_k",
            "bootstrap_ci",
            "brier",
            "ece",
            "gap_closed",
            "pass_at_k",
            "random_at_k",
            "rerank_report",
        ],
        "trajlake.value.metrics",
    ),
    **dict.fromkeys(["Recipe", "load_recipe"], "trajlake.value.recipe"),
    **dict.fromkeys(
        ["comparison_table", "evaluation_report", "write_report"], "trajlake.value.report"
    ),
    **dict.fromkeys(["TrainedModel", "train_value_model"], "trajlake.value.train"),
}


__getattr__, __dir__ = lazy_exports("trajlake.value", _LAZY, globals())


__all__ = [
    "Evaluation",
    "FeatureBaseline",
    "Recipe",
    "SavedModel",
    "TrainedModel",
    "auroc",
    "best_at_k",
    "bootstrap_ci",
    "brier",
    "comparison_table",
    "ece",
    "evaluate_saved_model",
    "evaluation_report",
    "gap_closed",
    "load_examples",
    "load_model",
    "load_recipe",
    "pass_at_k",
    "random_at_k",
    "rerank_report",
    "split_by_task",
    "train_value_model",
    "write_report",
]
