"""Character gates: a detector is skipped when a character that every one of its matches
holds does not occur in the text.

Python's `re` scans a text at about the same speed whatever its pattern, so the cost of
redaction is the number of scans; a test for one absent character (`c in text`, a `memchr`)
costs a small fraction of one. A gate is a tuple of alternatives, each the characters of
one literal that some way of matching needs (`"AKIA"`, `"ASIA"`): the detector runs when
every character of some alternative occurs. A gate is sound when each alternative's
characters are a subset of what its matches hold; fewer characters gate less, never wrongly.
"""

from __future__ import annotations

# Lower-case letters from rarest to most common in English and code; characters outside
# this list (upper case, digits, punctuation) are tested first, as they are rarer still.
_LOWER_BY_RARITY = "zqxjkvbpygfwmucldrhsnioate"
_RANK = {c: i + 1 for i, c in enumerate(_LOWER_BY_RARITY)}
_LAST = len(_RANK) + 1


def rank(c: str) -> int:
    """Where `c` comes in testing order: lower is rarer, tested first."""
    if c in _RANK:
        return _RANK[c]
    return _LAST if c.isspace() else 0


Gate = tuple[str, ...]


def gate(*needles: str) -> Gate:
    """The gate of literals `needles`: each one's distinct characters, rarest first.

    Whitespace is left out: `" -p"` and `"\\t-p"` gate alike, and it is all but always there.
    """
    alternatives = {
        "".join(sorted({c for c in needle if not c.isspace()}, key=lambda c: (rank(c), c)))
        for needle in needles
    }
    if "" in alternatives:
        raise ValueError(f"a gate needs a character to test in each of {needles!r}")
    return tuple(sorted(alternatives))


def admits(text: str, chars: Gate) -> bool:
    """Whether every character of some alternative of the gate `chars` occurs in `text`."""
    for alternative in chars:
        for c in alternative:
            if c not in text:
                break
        else:
            return True
    return False
