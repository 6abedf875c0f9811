"""Held-out redaction cases: recall per family and no false positives on near-misses.

`holdout.jsonl` was written before the detectors it measures were built (fresh fakes with
real shapes in tool output, tool-call arguments, diffs, env dumps and config files);
`holdout_negatives.jsonl` holds near-misses for each context rule.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from trajlake.redact import evaluate
from trajlake.redact._patterns import FAMILY, KINDS

DATA = Path(__file__).resolve().parents[1] / "data" / "redaction"
FAMILIES = {
    "cloud", "vcs", "ai_provider", "saas", "registry", "private_key", "token", "password",
    "generic_secret", "personal",
}  # fmt: skip


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return evaluate(DATA / "holdout.jsonl", DATA / "holdout_negatives.jsonl")


def _per_family(report: dict[str, Any]) -> dict[str, tuple[int, int]]:
    totals: dict[str, list[int]] = {}
    for kind, stats in report["per_kind"].items():
        family = totals.setdefault(FAMILY[kind], [0, 0])
        family[0] += stats["n"]
        family[1] += round(stats["n"] * stats["recall"])
    return {f: (n, caught) for f, (n, caught) in totals.items()}


def test_every_family_has_enough_held_out_cases(report: dict[str, Any]) -> None:
    per_family = _per_family(report)
    assert set(per_family) == FAMILIES
    assert all(n >= 5 for n, _ in per_family.values()), per_family
    assert report["negatives"] >= 60


def test_holdout_cases_are_well_formed() -> None:
    for line in (DATA / "holdout.jsonl").read_text().splitlines():
        case = json.loads(line)
        assert case["kind"] in KINDS
        assert case["secret"] in case["text"]
    categories = Counter(
        json.loads(line)["kind"]
        for line in (DATA / "holdout_negatives.jsonl").read_text().splitlines()
    )
    assert min(categories.values()) >= 2


def test_recall_per_family_on_holdout(report: dict[str, Any]) -> None:
    for family, (n, caught) in _per_family(report).items():
        assert caught / n >= 0.95, (family, report["misses"])
    assert report["recall"] >= 0.95


def test_no_false_positive_on_holdout_negatives(report: dict[str, Any]) -> None:
    assert report["false_positives"] == []
