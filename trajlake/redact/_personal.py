"""Personal data detectors: e-mail addresses and phone numbers (family `personal`).

Both are conservative: an address must have a known TLD and must not be provenance (a
copyright or author line of a source file); a phone number is an international `+` form,
or a national form right after a word such as `phone` or `mobile`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from trajlake.redact._base import Span
from trajlake.redact._context import in_code, provenance

_EMAIL = re.compile(
    r"@((?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+"
    r"([A-Za-z]{2,24}))(?![A-Za-z0-9\-]|\.[A-Za-z0-9])"
)
_LOCAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
_TLDS = frozenset(
    (
        "com", "net", "org", "edu", "gov", "mil", "int", "info", "biz", "name", "pro", "mobi",
        "aero", "coop", "museum", "io", "ai", "dev", "app", "xyz", "tech", "cloud", "site",
        "online", "store", "shop", "blog", "email", "page", "team", "company", "inc", "llc", "ltd",
        "global", "group", "systems", "solutions", "services", "software", "digital", "network",
        "media", "studio", "design", "agency", "academy", "university", "school", "health", "bank",
        "finance", "capital", "consulting", "engineering", "ventures", "works", "world", "zone",
        "today", "life", "live", "news", "one", "top", "club", "art", "social", "space", "website",
        "wiki",
    )
)  # fmt: skip
_FILE_TLDS = frozenset(
    (
        "py", "md", "sh", "rs", "pl", "js", "ts", "go", "rb", "cs", "cc", "hh", "hs", "el", "ml",
        "jl", "fs", "so", "gz", "xz", "db", "mo", "po",
    )
)  # fmt: skip
_EXAMPLE_DOMAINS = ("example.com", "example.org", "example.net", ".example", ".test", ".invalid")
# Mailing lists and bot relays are addresses of no one in particular.
_LIST_DOMAINS = ("googlegroups.com", "noreply.github.com", "users.noreply.github.com")
_NO_REPLY = frozenset({"git", "noreply", "no-reply", "donotreply", "do-not-reply"})
# The git identity an agent harness tells its model to commit with (in every system prompt).
_AGENT_IDENTITIES = frozenset({"openhands@all-hands.dev"})
_SSH_CONTEXT = re.compile(r"\b(?:ssh|scp|sftp|rsync|mosh|ssh-copy-id|autossh)\b[^\n|;&]*$")


def _email_start(text: str, at: int) -> int:
    start = at
    while start > max(0, at - 64) and text[start - 1] in _LOCAL_CHARS:
        start -= 1
    if start >= 1 and text[start - 1] == "\\":
        start += 1  # "\nbob@..." in JSON text: the n belongs to the escape
    while start < at and text[start] == ".":
        start += 1
    return start


def _not_personal(local: str, domain: str) -> bool:
    labels = domain.split(".")
    return (
        not local
        or f"{local}@{domain}" in _AGENT_IDENTITIES
        or local in _NO_REPLY
        or domain.endswith(_EXAMPLE_DOMAINS)
        or domain.endswith(_LIST_DOMAINS)
        or local.startswith("your")
        or any(x == "example" or x.startswith("your") for x in labels)  # jane@mail.example
    )


def _quoted(text: str, start: int, end: int) -> bool:
    """A string literal on its own (`'a@b.com'`): how fixtures appear in code and tests."""
    return text[start - 1 : start] in ("'", '"') or text[end : end + 1] in ("'", '"')


def find_emails(text: str) -> Iterator[Span]:
    """E-mail addresses, except provenance, logins (`git@host:`, `ssh user@host`) and examples."""
    for m in _EMAIL.finditer(text):
        domain, tld = m.group(1).lower(), m.group(2).lower()
        if not ((len(tld) == 2 and tld not in _FILE_TLDS) or tld in _TLDS):
            continue
        start = _email_start(text, m.start())
        if _not_personal(text[start : m.start()].lower(), domain):
            continue
        follow = text[m.end() : m.end() + 2]
        if len(follow) == 2 and follow[0] == ":" and not follow[1].isspace():
            continue  # scp-like `user@host:path`, `git@github.com:org/repo`
        line_start = max(text.rfind("\n", 0, start) + 1, start - 200)  # bounded: no O(n²)
        token_start = max(text.rfind(" ", line_start, start), line_start)
        if "://" in text[token_start:start] or _SSH_CONTEXT.search(text, line_start, start):
            continue  # URL user info or an ssh login, not an address
        if provenance(text, start) or (_quoted(text, start, m.end()) and in_code(text, start)):
            continue  # public provenance, or a string literal of source code and its tests
        yield Span(start, m.end(), "email")


# International: `+` country code, then groups; 8 to 15 digits in all (E.164).
_INTL_PHONE = re.compile(
    r"\+(\d{1,3})(?:[ .\-]?\(\d{1,4}\))?(?:[ .\-]?\d{1,5}){1,5}(?![\d.\-]|[A-Za-z])"
)
# National forms, only right after a phone word: `(415) 555-0176`, `020 7946 0381`.
# One scan for `:` right after a phone word (`Phone:`, `"mobile": `, `Tel:`).
PHONE_WORD = re.compile(
    r":(?:(?<=hone:)|(?<=HONE:)|(?<=obile:)|(?<=OBILE:)|(?<=hone[\"']:)|(?<=obile[\"']:)"
    r"|(?<=\b[Tt]el:)|(?<=TEL:)|(?<=[Ff]ax:)|(?<=_number[\"']:))"
)
_NATIONAL_PHONE = re.compile(
    r"[ \t]*[\"']?[ \t]*"
    r"(\(?\d{2,5}\)?[ .\-]\d{3,4}[ .\-]?\d{3,4}|\+?\d[\d ().\-]{7,18}\d)(?![\d.\-]|[A-Za-z])"
)
_DATE_LIKE = re.compile(r"\+?\d{4}[\-./]\d{2}[\-./]\d{2}$")


def _digits(value: str) -> int:
    return sum(c.isdigit() for c in value)


def _plausible(value: str) -> bool:
    digits = _digits(value)
    return 8 <= digits <= 15 and not _DATE_LIKE.match(value) and value.count(".") < 3


def find_phones(text: str) -> Iterator[Span]:
    """International phone numbers (`+44 20 7946 0381`); see `national_phone` for the others."""
    for m in _INTL_PHONE.finditer(text):
        start = m.start()
        prev = text[start - 1 : start]
        value = m.group()
        separated = any(c in value for c in " .-(")
        if prev and (prev.isalnum() or prev in "+-_./\\" or prev == "\n"):
            continue  # arithmetic, an exponent, a diff line, an offset, a path
        if prev == "=" and " " not in value:
            continue  # `x=+12345678` is a number; `to=+49 151 2345678` a phone
        if (
            _plausible(value)
            and (separated or _digits(value) >= 10)
            and not (_quoted(text, start, m.end()) and in_code(text, start))
        ):
            yield Span(start, m.end(), "phone")


# The words after which a national number is a phone; `_forms` scans `:` for them
# along with its other `:` forms, so the text is passed over once.
PHONE_WORD_LOOKBEHINDS = (
    r"(?<=hone:)|(?<=HONE:)|(?<=obile:)|(?<=OBILE:)|(?<=hone[\"']:)|(?<=obile[\"']:)"
    r"|(?<=\b[Tt]el:)|(?<=TEL:)|(?<=[Ff]ax:)|(?<=_number[\"']:)"
)
PHONE_WORD = re.compile(f":(?:{PHONE_WORD_LOOKBEHINDS})")


def national_phone(text: str, colon: int) -> Span | None:
    """A national phone number right after the `:` of a phone word (`Mobile: 212-555-0143`)."""
    national = _NATIONAL_PHONE.match(text, colon + 1)
    if national is None:
        return None
    between = text[colon + 1 : national.start(1)]
    value = national.group(1)
    if "\n" in between or not _plausible(value) or not any(c in value for c in " .-()"):
        return None
    if in_code(text, national.start(1)):
        return None
    return Span(national.start(1), national.end(1), "phone")
