"""The generation loop over several seeds (`trajlake demo --seeds 0-9`): one fresh lake per seed,
and each policy's held-out success summarised over seeds — the mean, a 95% Student-t interval
over seeds, and the difference from rejection sampling paired by seed with its own interval."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trajlake._progress import Progress
from trajlake.loop._report import LoopReport
from trajlake.loop._run import run_loop
from trajlake.loop._steps import GEN1_VARIANT

BASELINE = "resolved-only"
"""The variant every gain is measured against: rejection sampling."""

CONFIDENCE = 0.95

GEN1_ROWS: tuple[tuple[str, str], ...] = (
    ("sampled", "policy v1, one rollout (random pick)"),
    ("selected", "best of N picked by the value model"),
    ("pass", "pass@N (oracle)"),
)
"""The gen-1 numbers summarised over seeds: `LoopReport.best_of_n` key, row label."""

SEEDS_REPORT = "seeds-report.json"


def parse_seeds(text: str) -> list[int]:
    """Seeds from ``"0-9"``, ``"0,3,5"`` or ``"0-3,7"`` (in order, each once)."""
    seeds: list[int] = []
    for part in text.split(","):
        piece = part.strip()
        first, sep, last = piece.partition("-")
        try:
            span = range(int(first), int(last) + 1) if sep else range(int(first), int(first) + 1)
        except ValueError:
            raise ValueError(
                f"seeds {text!r}: {piece!r} is not a seed or a range like 0-9"
            ) from None
        if not span or span.start < 0:
            raise ValueError(f"seeds {text!r}: {piece!r} is not a range of seeds >= 0")
        seeds += [s for s in span if s not in seeds]
    return seeds


def _two_sided_mass(t: float, dof: int) -> float:
    """P(|T| <= t) for Student's t with an integer number of degrees of freedom (the finite
    series of Abramowitz & Stegun 26.7.3-4: exact, no special functions needed)."""
    theta = math.atan(t / math.sqrt(dof))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if dof % 2 == 0:
        term = total = 1.0
        for k in range(2, dof, 2):
            term *= (k - 1) / k * cos2
            total += term
        return sin * total
    if dof == 1:
        return 2.0 * theta / math.pi
    term = total = math.cos(theta)
    for k in range(3, dof - 1, 2):
        term *= (k - 1) / k * cos2
        total += term
    return 2.0 / math.pi * (theta + sin * total)


def t_quantile(confidence: float, dof: int) -> float:
    """The t with P(|T| <= t) = `confidence` for `dof` degrees of freedom (bisection)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    low, high = 0.0, 1.0
    while _two_sided_mass(high, dof) < confidence:
        low, high = high, high * 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        low, high = (mid, high) if _two_sided_mass(mid, dof) < confidence else (low, mid)
        if high - low < 1e-12:
            break
    return (low + high) / 2.0


@dataclass(frozen=True)
class Interval:
    """A mean over seeds and its Student-t interval (none with a single seed)."""

    mean: float
    low: float | None
    high: float | None
    sd: float | None
    n: int


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean ± t(confidence, n − 1) · sd / √n of `values` (sd with n − 1 in the denominator)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values to summarise")
    mean = sum(values) / n
    if n == 1:
        return Interval(mean, None, None, None, 1)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, sd, n)


@dataclass(frozen=True)
class SeedsRow:
    """One policy's held-out success over seeds, and its gain over rejection sampling."""

    key: str
    label: str
    per_seed: dict[int, float]
    success: Interval
    gain: Interval | None
    """Paired by seed: mean and interval of (this − rejection sampling); None for the baseline
    itself, or for a gen-1 row."""


def summarize(
    per_seed: Mapping[int, Mapping[str, float]],
    labels: Mapping[str, str],
    *,
    baseline: str | None = BASELINE,
    confidence: float = CONFIDENCE,
) -> list[SeedsRow]:
    """One row per key of `labels` (in that order): mean and interval over the seeds of
    `per_seed[seed][key]`, and the paired gain over `baseline` (None: no gains)."""
    if not per_seed:
        raise ValueError("no seeds to summarise")
    rows = []
    for key, label in labels.items():
        missing = [s for s, values in per_seed.items() if key not in values]
        if missing:
            raise ValueError(f"{key!r} has no value for seed(s) {missing}")
        values = {s: float(v[key]) for s, v in per_seed.items()}
        gain = None
        if baseline is not None and key != baseline:
            diffs = [values[s] - float(per_seed[s][baseline]) for s in values]
            gain = mean_interval(diffs, confidence)
        rows.append(
            SeedsRow(key, label, values, mean_interval(list(values.values()), confidence), gain)
        )
    return rows


@dataclass
class SeedsReport:
    """A loop run per seed and its summary (JSON-able via `to_dict`)."""

    root: str
    seeds: list[int]
    quick: bool
    gen1_variant: str
    confidence: float = CONFIDENCE
    policies: list[SeedsRow] = field(default_factory=list)
    """Held-out exact success of every behaviour-cloned policy, with the gain over rejection
    sampling."""
    gen1: list[SeedsRow] = field(default_factory=list)
    """Gen-1 success on the held-out tasks (from SQL over each lake's outcomes)."""
    runs: dict[int, dict[str, str]] = field(default_factory=dict)
    """Per seed: its lake and report.json."""
    value_model: str = ""
    """The kind of value model the runs trained ('hybrid', 'transformer' or 'baseline')."""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        data: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        return data


def summarize_reports(
    reports: Sequence[LoopReport], *, confidence: float = CONFIDENCE
) -> tuple[list[SeedsRow], list[SeedsRow]]:
    """The policy rows and the gen-1 rows of `SeedsReport` from one loop report per seed."""
    labels = {p.variant: p.name for p in reports[0].policies}
    policies = {r.seed: {p.variant: p.exact_success_heldout for p in r.policies} for r in reports}
    gen1 = {r.seed: {k: r.best_of_n[k] for k, _ in GEN1_ROWS} for r in reports}
    return (
        summarize(policies, labels, confidence=confidence),
        summarize(gen1, dict(GEN1_ROWS), baseline=None, confidence=confidence),
    )


def run_seeds(
    root: str | os.PathLike[str],
    seeds: Sequence[int],
    *,
    quick: bool = False,
    out: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    value_model: str = "auto",
) -> SeedsReport:
    """Run the generation loop once per seed, each in a new lake `<root>/seed-<n>`, and
    summarise the held-out success of every policy over the seeds.

    Args:
        root: Folder of the per-seed lakes (`<root>/seed-<n>`; each must hold no trajectories).
        seeds: At least two distinct seeds.
        quick: The smaller run for each seed.
        out: Folder of the per-seed reports (`<out>/seed-<n>`) and of `seeds-report.json`
            (default: each lake's `demo-report` and `<root>/seeds-report.json`).
        progress: Told when each step of each run starts and ends.
        value_model: The value model of every run ('auto', 'hybrid', 'transformer' or
            'baseline').

    Returns:
        The summary; it is also written to `seeds-report.json`.
    """
    if len(set(seeds)) != len(seeds) or len(seeds) < 2:
        raise ValueError(
            f"an interval over seeds needs at least two distinct seeds, got {list(seeds)}; "
            "for one run use --seed"
        )
    start = time.perf_counter()
    base = Path(root)
    report = SeedsReport(str(base.resolve()), list(seeds), quick, GEN1_VARIANT)
    loops = []
    for seed in seeds:
        seed_out = None if out is None else Path(out) / f"seed-{seed}"
        loop = run_loop(
            base / f"seed-{seed}",
            quick=quick,
            seed=seed,
            out=seed_out,
            progress=progress,
            value_model=value_model,
        )
        report.runs[seed] = {"lake": loop.lake, "report": loop.files["report"]}
        report.value_model = loop.value_model["kind"]
        loops.append(loop)
    report.policies, report.gen1 = summarize_reports(loops, confidence=report.confidence)
    report.seconds = round(time.perf_counter() - start, 3)
    target = (Path(out) if out is not None else base) / SEEDS_REPORT
    target.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    return report


def _cell(interval: Interval | None, *, signed: bool = False) -> str:
    if interval is None:
        return "–"
    fmt = "{:+.3f}" if signed else "{:.3f}"
    if interval.low is None or interval.high is None:
        return fmt.format(interval.mean)
    return f"{fmt.format(interval.mean)} [{fmt.format(interval.low)}, {fmt.format(interval.high)}]"


def seeds_table(report: SeedsReport) -> str:
    """The summary as two Markdown tables: the cloned policies, then gen-1."""
    pct = f"{report.confidence:.0%}"
    n = len(report.seeds)
    lines = [
        f"| next policy ({n} seeds) | held-out success, mean [{pct} CI] "
        f"| gain over rejection sampling, paired [{pct} CI] |",
        "| --- | ---: | ---: |",
    ]
    for row in report.policies:
        used = " — used for gen-1" if row.key == report.gen1_variant else ""
        lines.append(
            f"| {row.label}{used} | {_cell(row.success)} | {_cell(row.gain, signed=True)} |"
        )
    lines += ["", f"| gen-1 on held-out tasks ({n} seeds) | success, mean [{pct} CI] |"]
    lines.append("| --- | ---: |")
    lines += [f"| {row.label} | {_cell(row.success)} |" for row in report.gen1]
    return "\n".join(lines)
