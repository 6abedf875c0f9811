"""A feature baseline for trajectory value: hand-made whole-trajectory features read with one SQL
query, a numpy logistic regression (the prefix value model's Newton fit), and its evaluation on
held-out tasks (AUROC, Brier, ECE, Best@k; methods.md §7)."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import numpy.typing as npt

from trajlake.credit.value_model import (
    fit_logistic,
    read_model_json,
    sigmoid,
    weights_dict,
    weights_of,
)
from trajlake.errors import TrajlakeError
from trajlake.query import sql
from trajlake.value.dataset import ValueExample, balance, load_examples, split_by_task
from trajlake.value.metrics import RerankAtK, auroc, auroc_per_task, brier, ece, rerank_report

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef

FORMAT = "trajlake.feature-logreg/1"
OTHER = "<other>"
Array = npt.NDArray[np.float64]

NUMERIC_FEATURES = (
    "n_turns",
    "log_total_tokens",
    "submitted",
    "status_truncated",
    "status_error",
    "status_timeout",
    "n_tool_calls",
    "n_tool_errors",
    "error_rate",
    "n_edits",
    "n_test_runs",
    "last_tests_passed",
    "hit_limits",
)

# DuckDB regexes (case-insensitive via the 'i' option). The test pattern mirrors the prefix value
# model's; an observation "reports tests" when it says passed/failed, and the last such one
# counts as passing when it says passed and not failed (a final `submit` echo says neither).
_EDIT = "edit|str_replace|apply_patch|write"
_TEST = r"pytest|unittest|\btox\b|npm test|go test|cargo test|run_tests"
_REPORT = r"\bpassed\b|\bfailed\b"

_FEATURES_SQL = """
WITH ids AS (SELECT unnest($ids::VARCHAR[]) AS trajectory_id),
msg AS (
    SELECT trajectory_id,
           count(*) FILTER (WHERE role = 'assistant') AS n_assistant,
           coalesce(sum(coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0)), 0)
               AS msg_tokens,
           count(*) FILTER (WHERE role NOT IN ('assistant', 'system')
               AND (coalesce(is_error, false) OR coalesce(exit_code, 0) <> 0)) AS n_errors,
           arg_max(content, idx) FILTER (WHERE role = 'tool'
               AND regexp_matches(content, $report, 'i')) AS last_report
    FROM messages JOIN ids USING (trajectory_id)
    GROUP BY trajectory_id
),
calls AS (
    SELECT trajectory_id, count(*) AS n_calls,
           count(*) FILTER (WHERE regexp_matches(coalesce(tool_name, ''), $edit, 'i'))
               AS n_edits,
           count(*) FILTER (WHERE regexp_matches(
               coalesce(tool_name, '') || ' ' || coalesce(arguments, ''), $test, 'i'))
               AS n_tests
    FROM tool_calls JOIN ids USING (trajectory_id)
    GROUP BY trajectory_id
)
SELECT t.trajectory_id,
       coalesce(t.n_turns, m.n_assistant, 0) AS n_turns,
       ln(1 + coalesce(t.total_tokens, m.msg_tokens, 0)) AS log_total_tokens,
       coalesce(trim(t.final_output), '') <> '' AS submitted,
       coalesce(t.status = 'truncated', false) AS status_truncated,
       coalesce(t.status = 'error', false) AS status_error,
       coalesce(t.status = 'timeout', false) AS status_timeout,
       coalesce(c.n_calls, 0) AS n_tool_calls,
       coalesce(m.n_errors, 0) AS n_tool_errors,
       coalesce(m.n_errors, 0) / greatest(coalesce(c.n_calls, 0), 1) AS error_rate,
       coalesce(c.n_edits, 0) AS n_edits,
       coalesce(c.n_tests, 0) AS n_test_runs,
       coalesce(regexp_matches(m.last_report, '\\bpassed\\b', 'i')
                AND NOT regexp_matches(m.last_report, '\\bfailed\\b', 'i'), false)
           AS last_tests_passed,
       coalesce(t.status = 'truncated'
                OR regexp_matches(coalesce(t.exit_reason, ''), 'limit|max_turns|budget', 'i'),
                false) AS hit_limits,
       t.harness, t.policy_model
FROM trajectories t JOIN ids USING (trajectory_id)
LEFT JOIN msg m USING (trajectory_id)
LEFT JOIN calls c USING (trajectory_id)
"""


def _top(values: Sequence[str | None], n: int) -> list[str]:
    # ties broken by name so the vocabulary does not depend on row order
    counts = Counter(v for v in values if v is not None)
    return sorted(sorted(counts, key=lambda v: (-counts[v], v))[:n])


def _one_hot(values: Sequence[str | None], vocab: Sequence[str]) -> Array:
    columns = [*vocab, OTHER]
    index = {v: i for i, v in enumerate(vocab)}
    out = np.zeros((len(values), len(columns)))
    for row, value in enumerate(values):
        out[row, index.get(value, len(vocab)) if value is not None else len(vocab)] = 1.0
    return out


def trajectory_features(
    lake: LakeStore,
    ids: Sequence[str],
    at: SnapshotRef = None,
    *,
    harnesses: Sequence[str] | None = None,
    policies: Sequence[str] | None = None,
    top_n: int = 5,
) -> tuple[Array, list[str]]:
    """Whole-trajectory features of `ids` (rows in that order), read with one SQL query.

    Numeric features are `NUMERIC_FEATURES`; then one-hots `harness:<name>` / `policy:<name>`
    over the given vocabularies (default: the `top_n` most frequent among `ids`), each with an
    `<other>` bucket for anything else or missing.

    Raises:
        TrajlakeError: when some id is not a trajectory at the snapshot.
    """
    if not ids:
        raise ValueError("ids must not be empty")
    params = {"ids": list(ids), "report": _REPORT, "edit": _EDIT, "test": _TEST}
    rows = {r[0]: r[1:] for r in sql(lake, _FEATURES_SQL, params, at=at).rows()}
    missing = [i for i in ids if i not in rows]
    if missing:
        raise TrajlakeError(
            f"{len(missing)} trajectories are not in the lake at this snapshot "
            f"(first: {missing[0]!r}); read features at the snapshot the examples came from"
        )
    width = len(NUMERIC_FEATURES)
    numeric = np.array([[float(v) for v in rows[i][:width]] for i in ids], dtype=np.float64)
    harness = [rows[i][width] for i in ids]
    policy = [rows[i][width + 1] for i in ids]
    h_vocab = list(harnesses) if harnesses is not None else _top(harness, top_n)
    p_vocab = list(policies) if policies is not None else _top(policy, top_n)
    matrix = np.hstack([numeric, _one_hot(harness, h_vocab), _one_hot(policy, p_vocab)])
    names = [
        *NUMERIC_FEATURES,
        *(f"harness:{v}" for v in [*h_vocab, OTHER]),
        *(f"policy:{v}" for v in [*p_vocab, OTHER]),
    ]
    return matrix, names


class FeatureBaseline:
    """Logistic regression on `trajectory_features`: P(resolved | whole trajectory)."""

    def __init__(self, l2: float = 1.0, top_n: int = 5) -> None:
        self.l2 = float(l2)
        self.top_n = int(top_n)
        self.harnesses: list[str] = []
        self.policies: list[str] = []
        self.feature_names: list[str] = []
        self.mean: Array | None = None
        self.scale: Array | None = None
        self.coef: Array | None = None

    def features(self, lake: LakeStore, ids: Sequence[str], at: SnapshotRef = None) -> Array:
        """The model's feature matrix for `ids` (its fitted category vocabularies)."""
        matrix, _ = trajectory_features(
            lake, ids, at, harnesses=self.harnesses, policies=self.policies
        )
        return matrix

    def fit(
        self, examples: Sequence[ValueExample], lake: LakeStore, at: SnapshotRef = None
    ) -> FeatureBaseline:
        """Fit on labelled examples; `at` defaults to the examples' snapshot."""
        if not examples:
            raise ValueError("examples must not be empty")
        at = examples[0].snapshot_id if at is None else at
        ids = [e.trajectory_id for e in examples]
        x, names = trajectory_features(lake, ids, at, top_n=self.top_n)
        self.harnesses = [n.split(":", 1)[1] for n in names if n.startswith("harness:")][:-1]
        self.policies = [n.split(":", 1)[1] for n in names if n.startswith("policy:")][:-1]
        self.feature_names = names
        self.mean, self.scale, self.coef = fit_logistic(x, [e.label for e in examples], self.l2)
        return self

    def predict_proba(
        self, examples: Sequence[ValueExample], lake: LakeStore, at: SnapshotRef = None
    ) -> Array:
        """P(success) per example, in order; `at` defaults to the examples' snapshot."""
        if self.coef is None or self.mean is None or self.scale is None:
            raise TrajlakeError("the baseline is not fitted: call fit() or load() first")
        if not examples:
            return np.zeros(0)
        at = examples[0].snapshot_id if at is None else at
        x = self.features(lake, [e.trajectory_id for e in examples], at)
        design = np.hstack([np.ones((len(x), 1)), (x - self.mean) / self.scale])
        return sigmoid(design @ self.coef)

    def to_dict(self) -> dict[str, Any]:
        """The fitted model as a JSON-able dict."""
        weights = weights_dict(self.mean, self.scale, self.coef, "baseline")
        return {
            "format": FORMAT,
            "l2": self.l2,
            "top_n": self.top_n,
            "harnesses": self.harnesses,
            "policies": self.policies,
            "features": self.feature_names,
            **weights,
        }

    def save(self, path: str | Path) -> None:
        """Write the fitted model as JSON (floats round-trip exactly)."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> FeatureBaseline:
        """Read a model written by `save`."""
        data = read_model_json(path, FORMAT, "feature baseline")
        model = cls(l2=data["l2"], top_n=data["top_n"])
        model.harnesses = list(data["harnesses"])
        model.policies = list(data["policies"])
        model.feature_names = list(data["features"])
        model.mean, model.scale, model.coef = weights_of(data)
        return model


class BaselineMetrics(TypedDict):
    """Held-out metrics of a value model on one set of examples."""

    n_examples: int
    n_tasks: int
    positive_rate: float
    auroc: float | None
    auroc_per_task: float | None
    n_auroc_tasks: int
    brier: float
    ece: float
    rerank: dict[int, RerankAtK]


def evaluate_model(
    model: FeatureBaseline,
    lake: LakeStore,
    examples: Sequence[ValueExample],
    *,
    at: SnapshotRef = None,
    ks: Sequence[int] = (1, 2, 4, 8),
) -> BaselineMetrics:
    """AUROC (pooled and mean per task), Brier, ECE (10 bins) and `rerank_report` on `examples`."""
    if not examples:
        raise ValueError("examples must not be empty")
    probs = model.predict_proba(examples, lake, at)
    labels = np.array([e.label for e in examples])
    tasks = np.array([e.task_id for e in examples])
    per_task, n_auroc_tasks = auroc_per_task(tasks, probs, labels)
    return BaselineMetrics(
        n_examples=len(examples),
        n_tasks=len(set(tasks.tolist())),
        positive_rate=float(labels.mean()),
        auroc=auroc(probs, labels),
        auroc_per_task=per_task,
        n_auroc_tasks=n_auroc_tasks,
        brier=brier(probs, labels),
        ece=ece(probs, labels),
        rerank=rerank_report(tasks, probs, labels, ks),
    )


def evaluate_baseline(
    lake: LakeStore,
    *,
    at: SnapshotRef = None,
    where: str | None = None,
    val_frac: float = 0.0,
    test_frac: float = 0.3,
    seed: int = 0,
    balance_ratio: float | None = None,
    l2: float = 1.0,
    top_n: int = 5,
    ks: Sequence[int] = (1, 2, 4, 8),
) -> tuple[FeatureBaseline, BaselineMetrics]:
    """Load examples at one snapshot, split by task, fit on train, evaluate on test.

    Balancing (negatives ≤ `balance_ratio` × positives) applies to the training split only:
    reranking metrics need every candidate of a test task.
    """
    examples = load_examples(lake, at=at, where=where)
    if not examples:
        raise TrajlakeError("no trajectories with outcomes at this snapshot: label some first")
    splits = split_by_task(examples, val_frac=val_frac, test_frac=test_frac, seed=seed)
    train = splits["train"]
    if balance_ratio is not None:
        train = balance(train, ratio=balance_ratio, seed=seed)
    if not train or not splits["test"] or math.isclose(sum(e.label for e in train), 0):
        raise TrajlakeError(
            "the task split left no training positives or no test examples: "
            "use more tasks or another seed/test_frac"
        )
    model = FeatureBaseline(l2=l2, top_n=top_n).fit(train, lake)
    return model, evaluate_model(model, lake, splits["test"], ks=ks)
