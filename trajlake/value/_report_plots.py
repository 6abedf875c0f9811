"""Evaluation report plots as PNG: reranking curves (Best@k vs k) and the reliability diagram.

matplotlib is imported only when a plot is drawn; figures use the Agg canvas, never pyplot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajlake.errors import MissingExtra

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def new_figure(size: tuple[float, float], rows: int, cols: int, **kw: Any) -> tuple[Figure, Any]:
    """A figure on the Agg canvas, without pyplot (no global backend or figure state)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:  # a base dependency: only a broken install lacks it
        raise MissingExtra(
            f"matplotlib draws the plots and could not be imported ({e}): pip install matplotlib"
        ) from e
    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False, **kw)


def rerank_panel(
    ax: Axes,
    rows: Sequence[Mapping[str, Any]],
    title: str,
    *,
    model: str = "model",
    fontsize: float | None = None,
) -> None:
    """Best@k, Random@k and Pass@k vs k from a report's `rerank` rows, on one axis."""
    points = [r for r in rows if r["best_at_k"] is not None]
    ax.set_title(title, fontsize=fontsize)
    ax.set_xlabel("k (candidates per task)")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    if not points:
        ax.text(0.5, 0.5, "no tasks", ha="center", va="center", transform=ax.transAxes)
        return
    ks = [r["k"] for r in points]
    ax.plot(ks, [r["pass_at_k"] for r in points], ":", marker="^", label="Pass@k (oracle)")
    ax.plot(ks, [r["best_at_k"] for r in points], "-", marker="o", label=f"Best@k ({model})")
    ax.plot(ks, [r["random_at_k"] for r in points], "--", label="Random@k")
    ax.set_xticks(ks)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=fontsize and fontsize - 2)


def plot_best_at_k(report: Mapping[str, Any], path: str | Path) -> Path:
    """Best@k, Random@k and Pass@k vs k on all tasks and on the rerankable subset, as PNG."""
    fig, axes = new_figure((10.0, 4.0), 1, 2)
    for ax, subset, title in (
        (axes[0][0], "all", "all tasks"),
        (axes[0][1], "rerankable", "rerankable tasks (0 < c < n)"),
    ):
        rows = report["rerank"][subset]
        rerank_panel(ax, rows, f"{title} ({rows[0]['n_tasks'] if rows else 0} tasks)")
    fig.suptitle(f"Reranking: {report['model_id']}")
    fig.savefig(path, format="png", dpi=100)
    return Path(path)


def plot_reliability(report: Mapping[str, Any], path: str | Path) -> Path:
    """Reliability diagram (observed vs mean predicted per bin, the diagonal, bin counts) as PNG.

    Raises:
        ValueError: when the report holds no reliability bins (scores not probabilities).
    """
    bins = report.get("reliability_bins")
    if not bins:
        raise ValueError("the report has no reliability bins: its scores are not probabilities")
    fig, axes = new_figure((5.5, 6.0), 2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    top, bottom = axes[0][0], axes[1][0]
    full = [b for b in bins if b["count"]]
    top.plot([0, 1], [0, 1], ":", color="gray", label="perfect calibration")
    top.plot([b["mean_prob"] for b in full], [b["frequency"] for b in full], "-o", label="model")
    top.set_ylabel("observed success rate")
    top.set_xlim(0, 1)
    top.set_ylim(-0.02, 1.02)
    top.grid(alpha=0.3)
    top.legend(loc="upper left")
    ece_value = report.get("ece")
    shown = "n/a" if ece_value is None else f"{ece_value:.3f}"
    top.set_title(f"Reliability: {report['model_id']} (ECE {shown})")
    width = [b["upper"] - b["lower"] for b in bins]
    bottom.bar([b["lower"] for b in bins], [b["count"] for b in bins], width=width, align="edge")
    bottom.set_xlabel("mean predicted P(success)")
    bottom.set_ylabel("candidates")
    fig.savefig(path, format="png", dpi=100)
    return Path(path)
