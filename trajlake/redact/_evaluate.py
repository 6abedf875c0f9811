"""Recall and false-positive rate of redaction on a labelled corpus (the numbers in
docs/redaction.md and the hold-out tests), kept apart from the redactor it measures.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trajlake.redact._redactor import redact_text

__all__ = ["evaluate"]


def _cases(source: Iterable[Mapping[str, Any]] | str | Path) -> list[Mapping[str, Any]]:
    if isinstance(source, (str, Path)):
        with open(source, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    return list(source)


def _rate(hits: int, n: int) -> float:
    return hits / n if n else 0.0


def evaluate(
    positives: Iterable[Mapping[str, Any]] | str | Path,
    negatives: Iterable[Mapping[str, Any]] | str | Path,
) -> dict[str, Any]:
    """Recall and false-positive rate of redaction on a labelled corpus, overall and per kind.

    Every kind is evaluated, personal data included (`redact_text(text, personal=True)`).

    Args:
        positives: cases `{"kind", "text", "secret"}` (or a JSONL path). A case is caught when
            `secret` no longer occurs in the redacted text and a placeholder of `kind` does.
        negatives: cases `{"kind", "text"}` (or a JSONL path), `kind` naming the near-miss
            category. Any change to the text is a false positive.

    Returns:
        `recall`, `false_positive_rate`, counts, `per_kind` (recall per secret kind),
        `per_category` (false-positive rate per negative category), and the failing cases
        under `misses` and `false_positives`.
    """
    per_kind: dict[str, list[int]] = {}
    misses: list[dict[str, str]] = []
    pos = _cases(positives)
    for case in pos:
        kind, text, secret = case["kind"], case["text"], case["secret"]
        if secret not in text:
            raise ValueError(f"positive case's secret does not occur in its text: {text!r}")
        out, _ = redact_text(text, personal=True)
        caught = secret not in out and f"<SECRET:{kind}:" in out
        stats = per_kind.setdefault(kind, [0, 0])
        stats[0] += 1
        stats[1] += caught
        if not caught:
            misses.append({"kind": kind, "text": text, "redacted": out})
    per_category: dict[str, list[int]] = {}
    false_positives: list[dict[str, str]] = []
    neg = _cases(negatives)
    for case in neg:
        text = case["text"]
        out, _ = redact_text(text, personal=True)
        category = case.get("kind", "other")
        stats = per_category.setdefault(category, [0, 0])
        stats[0] += 1
        if out != text:
            stats[1] += 1
            false_positives.append({"kind": category, "text": text, "redacted": out})
    return {
        "recall": _rate(len(pos) - len(misses), len(pos)),
        "false_positive_rate": _rate(len(false_positives), len(neg)),
        "positives": len(pos),
        "negatives": len(neg),
        "per_kind": {k: {"n": n, "recall": _rate(c, n)} for k, (n, c) in sorted(per_kind.items())},
        "per_category": {
            k: {"n": n, "false_positive_rate": _rate(c, n)}
            for k, (n, c) in sorted(per_category.items())
        },
        "misses": misses,
        "false_positives": false_positives,
    }
