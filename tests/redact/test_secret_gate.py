"""Character gates and the split key/value anchor scan: faster, and never a different result.

Every secret of the labelled redaction sets is found by a detector whose gate admits its text
(a gate that refused one would lose that secret), and the split anchor scans give exactly the
matches of the one alternation they replace, on the labelled sets and on texts built from the
anchor words and their separators.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from trajlake.redact import _keyvalue as keyvalue
from trajlake.redact import _patterns as patterns
from trajlake.redact._gate import admits, gate
from trajlake.redact._keyvalue import KV_ANCHOR, kv_anchors

DATA = Path(__file__).resolve().parents[1] / "data" / "redaction"


def _case_texts() -> list[str]:
    texts = []
    for path in sorted(DATA.glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f if line.strip()]
    return texts


CASES = _case_texts()


def _mixed(n: int, seed: int) -> list[str]:
    """Cases glued together and joined as redaction joins fields: contexts no case has alone."""
    rng = random.Random(seed)
    return [
        rng.choice(("", "\n\0\n", " ")).join(rng.sample(CASES, rng.randint(2, 5))) for _ in range(n)
    ]


def test_gate_is_the_characters_of_each_literal() -> None:
    chars = gate("AKIA", "ASIA", " -p")
    assert {frozenset(a) for a in chars} == {frozenset("AKI"), frozenset("ASI"), frozenset("-p")}
    assert admits("key AKIA", chars) and admits("x -p", chars)
    assert not admits("AKI only, no A-S-I-A", gate("ATATT3"))
    with pytest.raises(ValueError, match="a character to test"):
        gate("  ")


def test_every_labelled_secret_is_found_by_a_finder_its_gate_admits() -> None:
    texts = CASES + _mixed(600, 3)
    ran = 0
    for text in texts:
        for finder in patterns._FINDERS:
            if finder.needs is None:
                continue
            spans = list(finder.find(text))
            ran += bool(spans)
            assert not spans or admits(text, finder.needs), (finder.find.__name__, text[:200])
    assert ran > 200  # the sets exercise the gated finders, not only the ungated one


def test_auth_header_gates_admit_what_their_patterns_find() -> None:
    for text in CASES + _mixed(300, 4):
        for pattern, lead, _, chars in patterns._AUTH:
            if pattern.search(text):
                # Only a match preceded by its initial letter counts; its literal is in the gate.
                initials = {m.start() - lead - 1 for m in pattern.finditer(text)}
                found = any(text[i : i + 1] in "AaBb" for i in initials if i >= 0)
                assert not found or admits(text, chars), text[:200]


_ANCHOR_BITS = (
    "key", "Key", "KEY", "token", "Token", "TOKEN", "secret", "Secret", "SECRET", "pass",
    "Pass", "PASS", "pwd", "PWD", "cred", "Cred", "CRED", "SK", "cio", "=", ":", " ", '"', "'",
    "]", "\\", "_", "-", "word ", " oy2", "master.", "ion_", "ess_", "create ", "ssh", '" {',
    "{", "ab", "0123456789abcdef0123456789abcdef", "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6", "\n",
    "\0", "7", "x",
)  # fmt: skip


def test_split_anchor_scans_match_the_one_alternation() -> None:
    rng = random.Random(11)
    built = ["".join(rng.choices(_ANCHOR_BITS, k=rng.randint(3, 40))) for _ in range(20_000)]
    hits = 0
    for text in built + CASES + _mixed(300, 5):
        want = [(m.start(), m.end(), m.group()) for m in KV_ANCHOR.finditer(text)]
        got = [(a.start(), a.end(), a.group()) for a in kv_anchors(text)]
        assert got == want, text
        hits += len(want)
    assert hits > 20_000


def test_gated_detection_equals_ungated_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every finder run on every text, anchors by the one alternation: the same spans."""
    texts = CASES + _mixed(400, 6)
    kinds = frozenset(patterns.KINDS)
    fast = [patterns.find_secrets(t) for t in texts] + [
        patterns.find_secrets(t, kinds=kinds) for t in texts
    ]
    monkeypatch.setattr(
        patterns, "_FINDERS", tuple(f._replace(needs=None) for f in patterns._FINDERS)
    )
    monkeypatch.setattr(patterns, "_AUTH", tuple((p, n, i, ("",)) for p, n, i, _ in patterns._AUTH))
    monkeypatch.setattr(patterns, "_CHOSEN", {})
    monkeypatch.setattr(keyvalue, "kv_anchors", KV_ANCHOR.finditer)
    slow = [patterns.find_secrets(t) for t in texts] + [
        patterns.find_secrets(t, kinds=kinds) for t in texts
    ]
    assert fast == slow
    assert sum(map(len, fast)) > 500


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (
            "curl -H 'Authorization: Bearer Zx81kQ0pLm3nB7vT2wYc' https://api",
            "Zx81kQ0pLm3nB7vT2wYc",
        ),
        ('{"authorization": "Basic dXNlcjpQYXNzdzByZCExMjM0"}', "dXNlcjpQYXNzdzByZCExMjM0"),
        ("authorization=Token Qw3rTy7uI9oP1aS5dF8g", "Qw3rTy7uI9oP1aS5dF8g"),
        ("BEARER Zx81kQ0pLm3nB7vT2wYc", "Zx81kQ0pLm3nB7vT2wYc"),
    ],
)
def test_auth_scans_led_by_a_rare_letter_find_the_whole_value(text: str, value: str) -> None:
    spans = list(patterns._find_auth_headers(text))
    assert [text[s.start : s.end] for s in spans] == [value]
