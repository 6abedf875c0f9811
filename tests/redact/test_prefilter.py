"""The native prefilter: a detector ruled out for a text finds nothing in it, so redacting a
batch with prefilters gives exactly what redacting each trajectory alone gives.

Soundness is checked on the labelled redaction sets, on them glued together the way
trajectories join their fields, on texts built from the key/value anchor words, and on
secrets beside non-ASCII letters and digits (where RE2 and Python read classes differently).
"""

from __future__ import annotations

import copy
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.redact.test_secret_gate import _ANCHOR_BITS, CASES, _mixed
from trajlake.redact import Redactor, redact_row, redact_rows
from trajlake.redact import _patterns as patterns
from trajlake.redact._prefilter import relaxed, ruled_out, unled
from trajlake.redact._redactor import redact_batch

_PREFILTERED = [(i, f) for i, f in enumerate(patterns._FINDERS) if f.prefilter is not None]

# Secrets next to non-ASCII word characters and digits: Python's `\w`/`\d` take them, RE2's
# ASCII classes would not.
_UNICODE = [
    "пароль DB_PASSWORD٣=Xy7!pQ2zKw9 done",
    "clé api_key = 'zQ8vN2mK5pL9xR4t' fin",
    "Авторизация: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlX2hlcmU",
    "token: ghp_" + "Ab1" * 12 + " — naïve",
    "Ünïcödé MTk4NjIyNDgzNDcxOTI1MjQ4.Gmé2bX.abcdefghijklmnopqrstuvwxyz0123 ok",
    "١٢٣٤:db:user:S3cr3t!Pass99",
    "ça export SLACK=xoxb-١٢٣٤٥٦٧٨٩٠١٢-abcdefghij",
    "HTTP/1.1 200\nX-AUTH: BEARER Zk8pQ2mN7vL4xR9tW3yB",  # a form the labelled sets lack
]


def _built_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(_ANCHOR_BITS, k=rng.randint(3, 40))) for _ in range(n)]


def _matches(texts: list[str], pattern: str) -> list[bool]:
    return [bool(x) for x in pc.match_substring_regex(pa.array(texts), pattern).to_pylist()]


def test_relaxed_drops_lookarounds_and_widens_classes() -> None:
    assert relaxed(r"ab(?=c)(?<!x)d(?!e(?:f))") == "abd"
    assert relaxed(r"\w+\d") == r"[0-9A-Za-z_\x{80}-\x{10FFFF}]+[0-9\x{80}-\x{10FFFF}]"
    assert relaxed(r"[\w\-]") == r"[0-9A-Za-z_\x{80}-\x{10FFFF}\-]"
    # In a negated class the ASCII reading excludes less: kept as written.
    assert relaxed(r"[^\s\d\w]") == r"[^\s\d\w]"
    assert relaxed(r"[(?=]x") == r"[(?=]x"  # no group inside a class
    assert relaxed(r"a{36,251}b{3}c{40}d{2,}") == "a{16,}b{3}c{16,}d{2,}"
    assert relaxed(relaxed(r"\w\d{2}")) == relaxed(r"\w\d{2}")  # RE2's `\x{80}` kept whole
    for unsafe in (r"a\sb", r"\bkey", r"end$", r"(a)\1"):
        with pytest.raises(ValueError, match="no RE2 superset"):
            relaxed(unsafe)


def test_relaxed_patterns_match_whatever_the_python_pattern_matches() -> None:
    pattern = r"(?<![A-Za-z])\w{3}(?=\d)\d{2,40}(?![A-Za-z])"
    import re

    texts = ["abc12", "éàü٣٤", "xabc12y", "ab1", "日本語12"]
    python = [bool(re.search(pattern, t)) for t in texts]
    native = _matches(texts, relaxed(pattern))
    assert all(n for p, n in zip(python, native, strict=True) if p)
    assert python == [True, True, False, False, True]


def test_unled_keeps_what_follows_the_leading_classes() -> None:
    assert unled("[sr]k_(?:live|test)_") == "k_(?:live|test)_"
    assert unled(r"[MNO][A-Za-z0-9]{16,}\.[a-z]{6}") == r"\.[a-z]{6}"
    for kept in (r"[a]{3}[b]", "[a](?:x)", r"[a]\dx", "abc", "[a]"):
        assert unled(kept) == kept


def test_a_prefilter_matches_every_text_its_detector_finds_something_in() -> None:
    texts = CASES + _mixed(600, 21) + _built_texts(5000, 22) + _UNICODE
    found = 0
    for _, finder in _PREFILTERED:
        hits = [bool(list(finder.find(t))) for t in texts]
        native = _matches(texts, finder.prefilter or "")
        missed = [t[:200] for t, h, n in zip(texts, hits, native, strict=True) if h and not n]
        assert not missed, (finder.find.__name__, missed[:3])
        found += sum(hits)
    assert found > 500  # the sets exercise the prefiltered detectors


def test_prefilters_rule_out_most_texts_without_secrets() -> None:
    plain = [
        "def add(key, value):\n    return {key: value}\n" * 20,
        "$ grep -rn pass src/ | head\nsrc/a.py:12: tests pass\n",
        "diff --git a/x b/x\n+    token = tokens[0]\n",
    ]
    out = patterns.rule_out(plain)
    assert all(len(o) >= len(_PREFILTERED) - 1 for o in out), out


def test_ruled_out_detection_equals_full_detection() -> None:
    texts = CASES + _mixed(400, 23) + _built_texts(2000, 24) + _UNICODE
    for kinds in (None, frozenset(patterns.KINDS)):
        skipped = patterns.rule_out(texts, kinds=kinds)
        assert any(skipped)
        fast = [
            patterns.find_secrets(t, kinds=kinds, ruled_out=s)
            for t, s in zip(texts, skipped, strict=True)
        ]
        assert fast == [patterns.find_secrets(t, kinds=kinds) for t in texts]


def test_a_text_arrow_cannot_hold_rules_nothing_out() -> None:
    texts = ["plain words", "bad \ud800 surrogate OPENAI_API_KEY=sk-proj-" + "a1B2" * 10]
    groups = patterns._prefilter_groups(None)
    out = ruled_out(texts, groups)
    assert out[0] and not out[1]
    ((redacted, count),) = redact_batch([([texts[1]], Redactor())])
    assert count == 1 and "<SECRET:" in redacted[0]


def _row(texts: list[str], i: int) -> dict[str, object]:
    """A row trajectory holding `texts` in its messages, arguments, attrs and tools."""
    messages: list[dict[str, object]] = []
    for j, text in enumerate(texts):
        if j % 3 == 2:
            call = {"id": f"c{j}", "name": "bash", "arguments": text}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            messages.append({"role": "user" if j % 3 == 0 else "tool", "content": text})
    return {
        "messages": messages,
        "attrs": {"note": texts[0], "n": i},
        "tools": [{"name": "bash", "description": texts[-1]}],
        "final_output": texts[len(texts) // 2],
    }


def test_batch_redaction_gives_the_rows_and_numbers_of_one_by_one() -> None:
    rng = random.Random(25)
    pool = CASES + _built_texts(400, 26) + _UNICODE + ["nothing here at all"] * 200
    rows = [_row(rng.sample(pool, rng.randint(1, 9)), i) for i in range(300)]
    alone = copy.deepcopy(rows)
    counts_alone = [redact_row(r, Redactor()) for r in alone]
    for personal in (False, True):
        batch = copy.deepcopy(rows)
        counts = redact_rows([(r, Redactor(personal=personal)) for r in batch])
        if not personal:
            assert counts == counts_alone and batch == alone
        else:
            expected = copy.deepcopy(rows)
            assert counts == [redact_row(r, Redactor(personal=True)) for r in expected]
            assert batch == expected
    assert sum(counts_alone) > 100
