"""PNG plots of the loop: success per generation and method, value curves of sample
trajectories against the environment's true V*, and Best@k curves of the value model.

matplotlib is imported only when a plot is drawn; figures use the Agg canvas, never pyplot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajlake.value._report_plots import new_figure, rerank_panel

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def _bars(ax: Axes, labels: Sequence[str], values: Sequence[float], title: str) -> None:
    positions = list(range(len(labels)))
    ax.barh(positions, values, color="tab:blue", alpha=0.8)
    for y, v in zip(positions, values, strict=True):
        inside = v > 0.85  # a long bar gets its label inside, where there is room
        x, ha, color = (v - 0.01, "right", "white") if inside else (v + 0.01, "left", "black")
        ax.text(x, y, f"{v:.3f}", va="center", ha=ha, fontsize=8, color=color)
    ax.set_yticks(positions, labels=list(labels), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("success rate")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)


def plot_success(
    measured: Mapping[str, float], expected: Mapping[str, float], path: str | Path
) -> Path:
    """Success per generation and method (measured in the lake) beside each policy's exact
    expected success on the held-out tasks."""
    fig, axes = new_figure((11.0, 4.0), 1, 2)
    _bars(axes[0][0], list(measured), list(measured.values()), "measured (SQL over outcomes)")
    _bars(axes[0][1], list(expected), list(expected.values()), "exact expected success, held-out")
    fig.suptitle("Success per generation and method")
    fig.savefig(path, format="png", dpi=100)
    return Path(path)


def plot_value_curves(curves: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """V(s_0) … V(s_T) of sample trajectories: one panel each, one line per value source.

    Each curve is ``{"trajectory_id", "resolved", "series": {source: [values]}}``.
    """
    cols = 2
    rows = max(1, (len(curves) + cols - 1) // cols)
    fig, axes = new_figure((10.0, 3.2 * rows), rows, cols)
    for i in range(rows * cols):
        ax = axes[i // cols][i % cols]
        if i >= len(curves):
            ax.set_axis_off()
            continue
        curve = curves[i]
        for source, values in curve["series"].items():
            style = "-" if source.startswith("true") else "--"
            ax.plot(range(len(values)), values, style, marker="o", markersize=3, label=source)
        outcome = "resolved" if curve["resolved"] else "failed"
        ax.set_title(f"{curve['trajectory_id']} ({outcome})", fontsize=9)
        ax.set_xlabel("state t (before turn t; T = end)")
        ax.set_ylabel("V(s_t)")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle("Value curves of gen-0 trajectories: credit sources vs the true V*")
    fig.savefig(path, format="png", dpi=100)
    return Path(path)


def plot_best_at_k(reports: Mapping[str, Mapping[str, Any]], path: str | Path) -> Path:
    """Best@k, Random@k and Pass@k vs k, one panel per evaluation report (all tasks)."""
    fig, axes = new_figure((5.0 * max(len(reports), 1), 4.0), 1, max(len(reports), 1))
    for i, (title, report) in enumerate(reports.items()):
        rows, label = report["rerank"]["all"], f"{title} ({report['n_tasks']} tasks)"
        rerank_panel(axes[0][i], rows, label, model="value model", fontsize=10)
    fig.suptitle("Best-of-k with the value model")
    fig.savefig(path, format="png", dpi=100)
    return Path(path)
