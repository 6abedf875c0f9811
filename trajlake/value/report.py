"""Evaluation reports of value and reranking models: one JSON-able dict per model with task
bootstrap CIs (methods.md §7), written out as JSON, Markdown and PNG plots, and compared in one
Markdown table."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

# Plots live in `_report_plots`; re-exported (explicitly, `as`) as part of this API.
from trajlake.value._report_plots import plot_best_at_k as plot_best_at_k
from trajlake.value._report_plots import plot_reliability as plot_reliability
from trajlake.value.metrics import (
    auroc,
    auroc_per_task,
    best_at_k,
    brier,
    ece,
    pass_at_k,
    reliability_bins,
    rerank_report,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

ALPHA = 0.05
"""Two-sided level of the bootstrap intervals (95%)."""

_NOT_PROBABILITIES = (
    "scores are not probabilities (e.g. a Bradley-Terry model's): Brier, ECE and the "
    "reliability diagram are not reported"
)


# --------------------------------------------------------------------------- per-task statistics


@dataclasses.dataclass(frozen=True)
class _Tasks:
    """Per-task statistics from which every resampled metric is an average or a sum."""

    groups: list[IntArray]
    best: FloatArray  # Best@k of each task
    rand: FloatArray  # c/n
    oracle: FloatArray  # Pass@k
    rerankable: npt.NDArray[np.bool_]
    auroc: FloatArray  # within-task AUROC, NaN without both classes
    sq_err: FloatArray  # Σ (p - y)² over the task's candidates (probabilities only)
    bin_gap: FloatArray  # (tasks, bins): Σ y - Σ p per reliability bin


def _task_stats(
    ids: npt.NDArray[Any], s: FloatArray, y: IntArray, k: int, n_bins: int, probs: bool
) -> _Tasks:
    _, inverse = np.unique(ids, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.flatnonzero(np.diff(inverse[order])) + 1
    groups = [g.astype(np.int64) for g in np.split(order, bounds)]
    best = [best_at_k(np.zeros(len(g)), s[g], y[g], k) for g in groups]
    oracle = [pass_at_k(np.zeros(len(g)), y[g], k) for g in groups]
    per_auc = [auroc(s[g], y[g]) for g in groups]
    bins = np.minimum((s * n_bins).astype(np.int64), n_bins - 1) if probs else None
    gap = np.zeros((len(groups), n_bins))
    sq_err = np.zeros(len(groups))
    if bins is not None:
        for t, g in enumerate(groups):
            gap[t] = np.bincount(bins[g], weights=y[g] - s[g], minlength=n_bins)
            sq_err[t] = float(((s[g] - y[g]) ** 2).sum())
    return _Tasks(
        groups=groups,
        best=np.array(best),
        rand=np.array([y[g].mean() for g in groups]),
        oracle=np.array(oracle),
        rerankable=np.array([0 < y[g].sum() < len(g) for g in groups]),
        auroc=np.array([np.nan if a is None else a for a in per_auc]),
        sq_err=sq_err,
        bin_gap=gap,
    )


def _gap(best: float, rand: float, oracle: float) -> float | None:
    denom = oracle - rand
    return None if abs(denom) <= 1e-12 else (best - rand) / denom


def _resampled(
    stats: _Tasks, drawn: IntArray, s: FloatArray, y: IntArray, probs: bool
) -> dict[str, float | None]:
    """Every CI metric on one resample (`drawn`: task indices, repeats allowed)."""
    best, rand, oracle = stats.best[drawn], stats.rand[drawn], stats.oracle[drawn]
    rr = stats.rerankable[drawn]
    per_task = stats.auroc[drawn]
    per_task = per_task[~np.isnan(per_task)]
    index = np.concatenate([stats.groups[t] for t in drawn])
    out: dict[str, float | None] = {
        "best_at_k": float(best.mean()),
        "random_at_k": float(rand.mean()),
        "pass_at_k": float(oracle.mean()),
        "gap_closed": _gap(float(best.mean()), float(rand.mean()), float(oracle.mean())),
        "gap_closed_rerankable": (
            _gap(float(best[rr].mean()), float(rand[rr].mean()), float(oracle[rr].mean()))
            if rr.any()
            else None
        ),
        "auroc": auroc(s[index], y[index]),
        "auroc_per_task": float(per_task.mean()) if per_task.size else None,
    }
    if probs:
        n = len(index)
        out["brier"] = float(stats.sq_err[drawn].sum() / n)
        # Σ_b (|B_b|/N)·|freq - mean_p| = Σ_b |Σ y - Σ p| / N, so bin sums suffice
        out["ece"] = float(np.abs(stats.bin_gap[drawn].sum(axis=0)).sum() / n)
    return out


def _task_bootstrap(
    stats: _Tasks,
    points: Mapping[str, float | None],
    s: FloatArray,
    y: IntArray,
    *,
    probs: bool,
    n_boot: int,
    seed: int,
) -> dict[str, dict[str, float] | None]:
    """Percentile CIs that resample whole tasks with replacement (one draw serves all metrics).

    A metric undefined on the full data gets None; resamples where it is undefined are dropped.
    """
    rng = np.random.default_rng(seed)
    n_tasks = len(stats.groups)
    samples: dict[str, list[float]] = {name: [] for name in points}
    for _ in range(n_boot):
        drawn = rng.integers(0, n_tasks, size=n_tasks)
        for name, value in _resampled(stats, drawn, s, y, probs).items():
            if value is not None and name in samples:
                samples[name].append(value)
    out: dict[str, dict[str, float] | None] = {}
    for name, point in points.items():
        values = samples[name]
        if point is None or not values:
            out[name] = None
            continue
        low, high = np.quantile(values, [ALPHA / 2.0, 1.0 - ALPHA / 2.0])
        out[name] = {"point": point, "low": float(low), "high": float(high)}
    return out


# --------------------------------------------------------------------------- the report


def _check_inputs(
    task_ids: npt.ArrayLike, scores: npt.ArrayLike, labels: npt.ArrayLike, probabilities: bool
) -> tuple[npt.NDArray[Any], FloatArray, IntArray]:
    ids, s, y = np.asarray(task_ids).reshape(-1), np.asarray(scores, dtype=np.float64), labels
    if len(ids) != s.size or len(ids) != np.asarray(labels).size:
        raise ValueError("task_ids, scores and labels must have equal lengths")
    rerank_report(ids, s, y, [1])  # validates: non-empty, finite scores, 0/1 labels
    if probabilities and np.any((s < 0.0) | (s > 1.0)):
        raise ValueError(
            "scores outside [0, 1] are not probabilities: pass probabilities=False for a "
            "model whose scores are not (e.g. Bradley-Terry)"
        )
    return ids, s.reshape(-1), np.asarray(labels).reshape(-1).astype(np.int64)


def _rerank_rows(
    ids: npt.NDArray[Any], s: FloatArray, y: IntArray, ks: Sequence[int]
) -> dict[str, list[dict[str, Any]]]:
    by_k = rerank_report(ids, s, y, ks)
    return {subset: [{"k": k, **by_k[k][subset]} for k in ks] for subset in ("all", "rerankable")}


def evaluation_report(
    task_ids: npt.ArrayLike,
    scores: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    model_id: str,
    ks: Sequence[int] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    probabilities: bool = True,
    extra: Mapping[str, Any] | None = None,
    n_bins: int = 10,
) -> dict[str, Any]:
    """Held-out evaluation of one model's scores as a JSON-able dict (a pure function).

    Args:
        task_ids: Task id of each candidate.
        scores: Model score of each candidate (higher is better).
        labels: 1 if the candidate succeeds, else 0.
        model_id: Model the scores come from (recorded and shown in titles).
        ks: Subset sizes for the reranking curves; default 1…n, n the largest pool.
        n_boot: Bootstrap resamples (whole tasks drawn with replacement).
        seed: Seed of the bootstrap: the same inputs and seed give the same report.
        probabilities: Whether scores are P(success). When False (e.g. Bradley-Terry scores),
            Brier, ECE and the reliability bins are None and `notes` says why.
        extra: JSON-able fields stored under ``"extra"`` (split, snapshot, ...).
        n_bins: Equal-width bins for ECE and the reliability diagram.

    Returns:
        Counts, ``rerank`` (per subset, one row per k: best/random/pass@k, gap closed), AUROC
        pooled and per task, Brier, ECE, reliability bins; ``headline``: the metrics at the
        largest k (``k_max``): Best/Random/Pass@k, gap closed (all and rerankable), AUROC
        (pooled, per task), Brier, ECE; ``ci``: their 95% task-bootstrap intervals. None
        where undefined.
    """
    ids, s, y = _check_inputs(task_ids, scores, labels, probabilities)
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    _, sizes = np.unique(ids, return_counts=True)
    ks = list(range(1, int(sizes.max()) + 1)) if ks is None else sorted(set(ks))
    if not ks:
        raise ValueError("ks must not be empty")
    extra_fields = json.loads(json.dumps(dict(extra or {}))) if extra is not None else {}
    k_max = ks[-1]
    rerank = _rerank_rows(ids, s, y, ks)
    head, head_rr = rerank["all"][-1], rerank["rerankable"][-1]
    per_task, n_auroc_tasks = auroc_per_task(ids, s, y)
    points: dict[str, float | None] = {
        "best_at_k": head["best_at_k"],
        "random_at_k": head["random_at_k"],
        "pass_at_k": head["pass_at_k"],
        "gap_closed": head["gap_closed"],
        "gap_closed_rerankable": head_rr["gap_closed"],
        "auroc": auroc(s, y),
        "auroc_per_task": per_task,
    }
    notes: list[str] = []
    bins: list[dict[str, Any]] | None = None
    if probabilities:
        points["brier"], points["ece"] = brier(s, y), ece(s, y, n_bins)
        bins = [dataclasses.asdict(b) for b in reliability_bins(s, y, n_bins)]
    else:
        points["brier"] = points["ece"] = None
        notes.append(_NOT_PROBABILITIES)
    stats = _task_stats(ids, s, y, k_max, n_bins, probabilities)
    ci = _task_bootstrap(stats, points, s, y, probs=probabilities, n_boot=n_boot, seed=seed)
    return {
        "model_id": model_id,
        "n_examples": len(y),
        "n_tasks": len(sizes),
        "n_rerankable_tasks": int(stats.rerankable.sum()),
        "positive_rate": float(y.mean()),
        "ks": ks,
        "k_max": k_max,
        "rerank": rerank,
        "headline": points,
        "auroc": points["auroc"],
        "auroc_per_task": per_task,
        "n_auroc_tasks": n_auroc_tasks,
        "probabilities": probabilities,
        "brier": points.get("brier"),
        "ece": points.get("ece"),
        "n_bins": n_bins,
        "reliability_bins": bins,
        "ci": {"level": 1.0 - ALPHA, "n_boot": n_boot, "seed": seed, "k": k_max, **ci},
        "notes": notes,
        "extra": extra_fields,
    }


def paired_difference(
    task_ids: npt.ArrayLike,
    scores: npt.ArrayLike,
    other: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    k: int,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, dict[str, float] | None]:
    """Best@k and gap closed of `scores` minus those of `other` on the same candidates, with
    95% intervals from one task bootstrap that draws the same tasks for both (so the interval
    is of the difference, narrower than comparing two separate intervals)."""
    ids, s, y = _check_inputs(task_ids, scores, labels, False)
    _, o, _ = _check_inputs(task_ids, other, labels, False)
    a, b = _task_stats(ids, s, y, k, 1, False), _task_stats(ids, o, y, k, 1, False)

    def diff(drawn: IntArray) -> dict[str, float | None]:
        rand, oracle = float(a.rand[drawn].mean()), float(a.oracle[drawn].mean())
        gap_a = _gap(float(a.best[drawn].mean()), rand, oracle)
        gap_b = _gap(float(b.best[drawn].mean()), rand, oracle)
        return {
            "best_at_k": float((a.best[drawn] - b.best[drawn]).mean()),
            "gap_closed": None if gap_a is None or gap_b is None else gap_a - gap_b,
        }

    every = np.arange(len(a.groups))
    points, rng = diff(every), np.random.default_rng(seed)
    samples: dict[str, list[float]] = {name: [] for name in points}
    for _ in range(n_boot):
        for name, value in diff(rng.integers(0, len(every), size=len(every))).items():
            if value is not None:
                samples[name].append(value)
    out: dict[str, dict[str, float] | None] = {}
    for name, point in points.items():
        if point is None or not samples[name]:
            out[name] = None
            continue
        low, high = np.quantile(samples[name], [ALPHA / 2.0, 1.0 - ALPHA / 2.0])
        out[name] = {"point": point, "low": float(low), "high": float(high)}
    return out


# --------------------------------------------------------------------------- Markdown, files


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _fmt_ci(ci: Mapping[str, float] | None) -> str:
    return "–" if ci is None else f"[{ci['low']:.3f}, {ci['high']:.3f}]"


def _summary_rows(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(metric label, key in the report's `ci`) of the summary table, in order."""
    k = report["k_max"]
    return [
        (f"Best@{k}", "best_at_k"),
        (f"Random@{k}", "random_at_k"),
        (f"Pass@{k} (oracle)", "pass_at_k"),
        (f"gap closed @{k} (all)", "gap_closed"),
        (f"gap closed @{k} (rerankable)", "gap_closed_rerankable"),
        ("AUROC (pooled)", "auroc"),
        ("AUROC (mean per task)", "auroc_per_task"),
        ("ECE", "ece"),
        ("Brier", "brier"),
    ]


def report_markdown(report: Mapping[str, Any]) -> str:
    """The report's Markdown summary: counts, then each headline metric with its 95% CI."""
    ci = report["ci"]
    lines = [
        f"# Evaluation: {report['model_id']}",
        "",
        f"{report['n_examples']} candidates, {report['n_tasks']} tasks "
        f"({report['n_rerankable_tasks']} rerankable), positive rate "
        f"{report['positive_rate']:.3f}; 95% CIs from {ci['n_boot']} task-bootstrap resamples "
        f"(seed {ci['seed']}).",
        "",
        "| metric | value | 95% CI |",
        "| --- | ---: | --- |",
    ]
    for label, key in _summary_rows(report):
        lines.append(f"| {label} | {_fmt(report['headline'][key])} | {_fmt_ci(ci.get(key))} |")
    if report["notes"]:
        lines += ["", *(f"- {note}" for note in report["notes"])]
    if report.get("floors"):
        lines += ["", *floors_markdown(report)]
    return "\n".join(lines) + "\n"


def _with_ci(point: float | None, ci: Mapping[str, float] | None) -> str:
    return _fmt(point) if ci is None else f"{_fmt(point)} {_fmt_ci(ci)}"


def floors_markdown(report: Mapping[str, Any]) -> list[str]:
    """Lines of the floors table: the model and each floor on the same candidates, with CIs,
    and the model minus each floor (a paired task bootstrap)."""
    k = report["k_max"]
    lines = [
        "## Floors (same candidates, 95% task-bootstrap CIs)",
        "",
        f"| scorer | Best@{k} | gap closed @{k} | AUROC | AUROC per task | ECE "
        f"| model − floor: Best@{k} | model − floor: gap closed |",
        "| --- | --- | --- | --- | --- | ---: | --- | --- |",
    ]
    rows = [("**this model**", report, None), *((n, f, f) for n, f in report["floors"].items())]
    for name, r, floor in rows:
        head, ci = r["headline"], r["ci"]
        delta = (floor or {}).get("model_minus_floor") or {}
        cells = [
            *(_with_ci(head[m], ci.get(m)) for m in ("best_at_k", "gap_closed", "auroc")),
            _with_ci(head["auroc_per_task"], ci.get("auroc_per_task")),
            _fmt(head.get("ece")),
            *(
                _with_ci(d["point"], d) if d else "–"
                for d in (delta.get("best_at_k"), delta.get("gap_closed"))
            ),
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    notes = [f"- {n}: {f['description']}" for n, f in report["floors"].items()]
    return [*lines, "", *notes]


def write_report(
    report: Mapping[str, Any], out_dir: str | Path, *, name: str = "eval"
) -> dict[str, Path]:
    """Write `<name>.json`, `<name>.md`, `best_at_k.png` and `reliability.png` into `out_dir`.

    PNG names get a `<name>_` prefix unless `name` is the default, so several reports can
    share a folder. The reliability diagram is skipped when the scores are not probabilities.

    Returns:
        The paths written, keyed ``json``, ``markdown``, ``best_at_k`` and ``reliability``.
    """
    if not name or "/" in name or "\\" in name:
        raise ValueError(f"name must be a plain file stem, got {name!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prefix = "" if name == "eval" else f"{name}_"
    paths = {"json": out / f"{name}.json", "markdown": out / f"{name}.md"}
    paths["json"].write_text(
        json.dumps(report, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8"
    )
    paths["markdown"].write_text(report_markdown(report), encoding="utf-8")
    paths["best_at_k"] = plot_best_at_k(report, out / f"{prefix}best_at_k.png")
    if report.get("reliability_bins"):
        paths["reliability"] = plot_reliability(report, out / f"{prefix}reliability.png")
    return paths


def comparison_table(reports: Mapping[str, Mapping[str, Any]]) -> str:
    """One Markdown table comparing models: rows = models (the mapping's keys), headline metrics.

    Columns: n (the largest k), Best@n, Random@n, Pass@n, gap closed on all / rerankable
    tasks, pooled AUROC and ECE; "–" where a metric is undefined or not reported.
    """
    if not reports:
        raise ValueError("reports must not be empty")
    header = ["n", "Best@n", "Random@n", "Pass@n", "gap closed (all / rerankable)", "AUROC", "ECE"]
    lines = ["| model | " + " | ".join(header) + " |", "| --- |" + " ---: |" * len(header)]
    for model, report in reports.items():
        head = report["headline"]
        cells = [
            str(report["k_max"]),
            *(_fmt(head[key]) for key in ("best_at_k", "random_at_k", "pass_at_k")),
            f"{_fmt(head['gap_closed'])} / {_fmt(head['gap_closed_rerankable'])}",
            _fmt(head["auroc"]),
            _fmt(head["ece"]),
        ]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
