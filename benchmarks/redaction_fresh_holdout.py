"""Redaction recall and false positives on a fresh holdout no detector was tuned on.

The cases in `tests/data/redaction/fresh_holdout.jsonl` (positives) and
`fresh_holdout_negatives.jsonl` (near-misses) were written from the provider formats alone,
without reference to the detectors or the other redaction test data. Each positive is redacted
with `Redactor(personal=True).redact_text`; it counts as caught when its `secret` no longer
occurs in the output, whatever the placeholder's kind. Separately, a caught case is "kind
matched" when a finding overlapping the secret has a kind whose family (`FAMILY`) is the
case's family. Any change to a negative is a false positive.

    python benchmarks/redaction_fresh_holdout.py            # table, misses, false positives
    python benchmarks/redaction_fresh_holdout.py --json     # the measurement as JSON
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trajlake.redact import FAMILY, Redactor

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "redaction"
POSITIVES = DATA / "fresh_holdout.jsonl"
NEGATIVES = DATA / "fresh_holdout_negatives.jsonl"


def _load(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _occurrences(text: str, secret: str) -> list[tuple[int, int]]:
    found, i = [], text.find(secret)
    while i >= 0:
        found.append((i, i + len(secret)))
        i = text.find(secret, i + 1)
    return found


def measure(positives: Path = POSITIVES, negatives: Path = NEGATIVES) -> dict[str, Any]:
    """Per-family recall, kind matches, misses and false positives of the fresh holdout."""
    families: dict[str, dict[str, int]] = {}
    misses: list[dict[str, Any]] = []
    mismatched: list[dict[str, Any]] = []
    pos = _load(positives)
    for case in pos:
        text, secret, fam = case["text"], case["secret"], case["family"]
        if secret not in text:
            raise ValueError(f"secret does not occur in its text: {text[:80]!r}")
        out, _ = Redactor(personal=True).redact_text(text)
        findings = Redactor(personal=True).findings([text])
        spots = _occurrences(text, secret)
        kinds = sorted({f.kind for f in findings for s, e in spots if f.start < e and s < f.end})
        caught = secret not in out
        matched = caught and any(FAMILY.get(k) == fam for k in kinds)
        row = families.setdefault(fam, {"cases": 0, "caught": 0, "kind_matched": 0})
        row["cases"] += 1
        row["caught"] += caught
        row["kind_matched"] += matched
        if not caught:
            misses.append({**case, "found_kinds": kinds, "redacted": out})
        elif not matched:
            mismatched.append({**case, "found_kinds": kinds})
    false_positives: list[dict[str, Any]] = []
    neg = _load(negatives)
    for case in neg:
        out, _ = Redactor(personal=True).redact_text(case["text"])
        if out != case["text"]:
            false_positives.append({**case, "redacted": out})
    caught = sum(r["caught"] for r in families.values())
    return {
        "positives": len(pos),
        "caught": caught,
        "recall": caught / len(pos),
        "kind_matched": sum(r["kind_matched"] for r in families.values()),
        "families": {
            f: {**r, "recall": r["caught"] / r["cases"]} for f, r in sorted(families.items())
        },
        "negatives": len(neg),
        "false_positives": false_positives,
        "false_positive_rate": len(false_positives) / len(neg),
        "misses": misses,
        "kind_mismatches": mismatched,
    }


def _short(text: str, width: int = 110) -> str:
    flat = text.replace("\n", "\\n")
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the measurement as JSON")
    args = parser.parse_args(argv)
    m = measure()
    if args.json:
        json.dump(m, sys.stdout, indent=2)
        print()
        return 0
    print(f"{'family':<16}{'cases':>6}{'caught':>8}{'recall':>8}{'kind ok':>9}")
    for fam, r in m["families"].items():
        print(f"{fam:<16}{r['cases']:>6}{r['caught']:>8}{r['recall']:>8.3f}{r['kind_matched']:>9}")
    print(
        f"{'overall':<16}{m['positives']:>6}{m['caught']:>8}{m['recall']:>8.3f}"
        f"{m['kind_matched']:>9}"
    )
    print(
        f"\nfalse positives: {len(m['false_positives'])}/{m['negatives']} "
        f"({m['false_positive_rate']:.3f})"
    )
    print(f"\nmisses ({len(m['misses'])}):")
    for c in m["misses"]:
        found = ",".join(c["found_kinds"]) or "-"
        print(f"  [{c['family']}/{c['kind']}] found={found}  {_short(c['text'])}")
    print(f"\ncaught under another family's kind ({len(m['kind_mismatches'])}):")
    for c in m["kind_mismatches"]:
        print(f"  [{c['family']}/{c['kind']}] as {','.join(c['found_kinds'])}  {_short(c['text'])}")
    print(f"\nfalse positives ({len(m['false_positives'])}):")
    for c in m["false_positives"]:
        print(f"  [{c['kind']}] {_short(c['redacted'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
