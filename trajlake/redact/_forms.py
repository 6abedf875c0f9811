"""Credentials named by a header, a JSON key or a URL parameter: `Cookie:` session ids, Docker
`"auth"`, GCP `private_key_id`, Telegram bot tokens, `.pgpass` lines (all found at a `:`), and
presigned-URL signatures, session cookies and AWS session tokens (found at an `=`).

Each family is one scan for its separator whose lookbehinds name the keys, so one test of the
character before the separator rejects most hits before any Python runs.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator

from trajlake.redact._base import (
    Span,
    at_boundary,
    before,
    char_classes,
    is_placeholder,
    mixed_case,
    strong,
)
from trajlake.redact._gate import gate
from trajlake.redact._personal import PHONE_WORD, PHONE_WORD_LOOKBEHINDS, national_phone

_END = r"(?![A-Za-z0-9_\-])"
# What a match of `find_equals_forms` needs (`_gate`).
EQUALS_GATE = gate(
    "sig=", "ignature=", "SESSID=", "SESSIONID=", "essionid=", "session=", ".sid=",
    "Security-Token=",
)  # fmt: skip


# `:` after a header or JSON key that names a credential; one scan for all of them.
_COLON_SCAN = re.compile(  # the names end in a quote or one of `eElLx`: one test rejects most `:`
    r":(?:(?<=\d:)(?:(?=A[\w\-]{34})|(?<=\d{4}:)(?=[\w.\-*]{1,63}:[\w.\-@]{1,63}:))"
    r"|(?<=[\"'eElLx]:)(?:(?<=ookie:|OOKIE:)|(?<=auth[\"']:)|(?<=auth\\\":)"
    r"|(?<=key_id[\"']:|SESSID[\"']:)|(?<=key_id\\\":)|(?<=SESSIONID[\"']:)"
    r"|(?<=essionid[\"']:)|" + PHONE_WORD_LOOKBEHINDS + "))"
)
# What `find_colon_forms` needs somewhere in a text (a prefilter, see `_prefilter`): the names
# of `_COLON_SCAN`'s lookbehinds before their `:`, a Telegram bot id, a `.pgpass` port.
COLON_PREFILTER = (
    r"\d:A|\d{4}:[^:\s]{1,63}:[^:\s]{1,63}:"
    r"|(?:ookie|OOKIE|auth[\"']|auth\\\"|key_id[\"']|SESSID[\"']|key_id\\\"|SESSIONID[\"']"
    r"|essionid[\"']|hone|HONE|obile|OBILE|hone[\"']|obile[\"']|[Tt]el|TEL|[Ff]ax|_number[\"']):"
)
# A `.pgpass` line, `hostname:port:database:username:password`, on a line of its own.
_PGPASS = re.compile(
    r"([A-Za-z0-9.\-*]{1,253}):(\d{4,5}):([\w.\-*]{1,63}):([\w.\-@*]{1,63})"
    r":([^\s:\\\"']{4,512})(?=\r?\n|\\[nr]|\"|$)"
)
_LINE_OPENERS = frozenset("\n\"' \t")


def _pgpass(text: str, colon: int) -> Span | None:
    """The password of a `.pgpass` line whose port ends at `colon`."""
    start = colon - 1
    while start > colon - 6 and text[start - 1].isdigit():
        start -= 1
    start -= 1  # the colon after the host name
    if colon - start not in (5, 6) or text[start] != ":":
        return None  # a port has 4 or 5 digits
    while start > colon - 270 and start and text[start - 1] in _HOST_CHARS:
        start -= 1
    opener = before(text, start, 1)
    escaped = before(text, start, 2) in ("\\n", "\\r")
    if opener and opener not in _LINE_OPENERS and not escaped:
        return None
    m = _PGPASS.match(text, start)
    if m is None or not any(c.isalpha() or c == "*" for c in m.group(3)):
        return None  # `x.py:1234:5:E501:…` is a compiler's message, not a `.pgpass` line
    value = m.group(5)
    named = ".pgpass" in before(text, start, 300) or "PGPASSFILE" in before(text, start, 300)
    if is_placeholder(value) or not (named or (char_classes(value) >= 3 and strong(value))):
        return None
    return Span(m.start(5), m.end(5), "password")


_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*")
_TELEGRAM = re.compile(r"(\d{5,16}):A[A-Za-z0-9_\-]{34}" + _END)
_QUOTED_AFTER = re.compile(r"[ \t]*\\?[\"']([^\"'\\\s]{8,4096})\\?[\"']")
_BASE64_CHARS = re.compile(r"[A-Za-z0-9+/]{8,}={0,2}")
_GCP_KEY_ID = re.compile(r"[0-9a-f]{40}")
_COOKIE_PAIR = re.compile(r"[ \t]*([A-Za-z0-9_.\-]{1,64})=([^;\s\"'\\]{1,4096})")
_SESSION_NAME = re.compile(r"(?i)sess(?:ion)?(?:[_.\-]?id)?$|\.sid$|^sid$|_session$|^session")


def _docker_auth(value: str) -> bool:
    """`"auth"` of a Docker config: base64 of `user:password`."""
    if not _BASE64_CHARS.fullmatch(value):
        return False
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (ValueError, binascii.Error):
        return False
    user, sep, password = decoded.partition(b":")
    return bool(sep and user and len(password) >= 4) and decoded.isascii()


def _telegram_body(body: str) -> bool:
    return mixed_case(body) and any(c.isdigit() for c in body) and not is_placeholder(body)


def session_value(value: str) -> bool:
    """A session id: long and random, not a word, a placeholder or an identifier."""
    return len(value) >= 16 and char_classes(value) >= 2 and not is_placeholder(value)


def _cookie_pairs(text: str, pos: int) -> Iterator[Span]:
    line_end = text.find("\n", pos, pos + 8192)
    end = line_end if line_end >= 0 else min(len(text), pos + 8192)
    while pos < end:
        m = _COOKIE_PAIR.match(text, pos, end)
        if m is None:
            return
        if (
            _SESSION_NAME.search(m.group(1))
            and session_value(m.group(2))
            and not _test_cookie(text, m.end())
        ):
            yield Span(m.start(2), m.end(2), "session_cookie")
        pos = m.end()
        while pos < end and text[pos] in "; \t":
            pos += 1


def find_colon_forms(text: str) -> Iterator[Span]:
    """Telegram bot tokens, Docker `auth`, GCP `private_key_id`, `Cookie:` session ids, phones."""
    for hit in _COLON_SCAN.finditer(text):
        pos = hit.start()
        if text[pos + 1 : pos + 2] != "A" and text[pos - 1 : pos].isdigit():
            span = _pgpass(text, pos)
            if span is not None:
                yield span
            continue
        if PHONE_WORD.match(text, pos):
            phone = national_phone(text, pos)
            if phone is not None:
                yield phone
            continue
        if text[pos + 1 : pos + 2] == "A":  # a Telegram bot token: <bot id>:A<34>
            start = pos
            while start > pos - 16 and before(text, start, 1).isdigit():
                start -= 1
            m = _TELEGRAM.match(text, start)
            bot_url = before(text, start, 3) == "bot"  # api.telegram.org/bot<token>/
            body = m.group().partition(":")[2] if m else ""
            if m and (bot_url or at_boundary(text, start)) and _telegram_body(body):
                yield Span(start, m.end(), "telegram_token")
            continue
        name = before(text, pos, 20).rstrip("\"'\\")
        if name.lower().endswith("cookie"):
            yield from _cookie_pairs(text, pos + 1)
            continue
        m = _QUOTED_AFTER.match(text, pos + 1)
        if m is None:
            continue
        value = m.group(1)
        if name.endswith("auth"):
            if _docker_auth(value):
                yield Span(m.start(1), m.end(1), "docker_auth")
        elif name.endswith("private_key_id"):
            if _GCP_KEY_ID.fullmatch(value):
                yield Span(m.start(1), m.end(1), "gcp_key_id")
        elif session_value(value):
            yield Span(m.start(1), m.end(1), "session_cookie")


# `=` after a URL signature or a session cookie name; one scan for all of them.
# The names end in one of `gedDn`: one test rejects most `=` before the name lookbehinds.
_EQUALS_SCAN = re.compile(
    r"=(?<=[gedDn]=)(?:(?<=[?&;]sig=)|(?<=ignature=)|(?<=SESSID=)|(?<=SESSIONID=)"
    r"|(?<=essionid=)|(?<=session=)|(?<=\.sid=)|(?<=_session_id=)|(?<=Security-Token=))"
)
_PARAM_VALUE = re.compile(r"[A-Za-z0-9%+/=_.~\-]{16,4096}")
# What `find_equals_forms` needs (a prefilter, see `_prefilter`): a name, its `=`, a value.
EQUALS_PREFILTER = (
    r"(?:[?&;]sig|ignature|SESSID|SESSIONID|essionid|session|\.sid|_session_id|Security-Token)="
    r"[A-Za-z0-9%+/=_.~\-]{16}"
)


_TEST_DOMAIN = re.compile(
    r"(?i);[ \t]*domain=\.?(?:[\w\-]+\.)*(?:example\.(?:com|org|net)|localhost|test)(?![\w\-.])"
)


def _test_cookie(text: str, pos: int) -> bool:
    """A cookie set for a documentation or test domain (`Domain=example.com`): a fixture."""
    line_end = text.find("\n", pos, pos + 512)
    return _TEST_DOMAIN.search(text, pos, line_end if line_end >= 0 else pos + 512) is not None


def find_equals_forms(text: str) -> Iterator[Span]:
    """Signatures of presigned URLs (`X-Amz-Signature=`, `sig=`) and session cookies."""
    done = 0  # the end of the last value read: a name inside a value is none
    for hit in _EQUALS_SCAN.finditer(text):
        if hit.start() < done:
            continue
        m = _PARAM_VALUE.match(text, hit.end())
        if m is None:
            continue
        done = m.end()
        value = m.group().rstrip(".")
        name = text[max(0, hit.start() - 16) : hit.start()]
        if name.endswith("Security-Token"):
            kind = "aws_session_token"
        elif name.endswith("sig") and ".core.windows.net" in before(text, hit.start(), 400):
            kind = "azure_key"  # an Azure SAS token's signature
        elif name.endswith(("sig", "ignature")):
            kind = "url_signature"
        else:
            kind = "session_cookie"
            if name.endswith("session") and before(text, hit.start() - 7, 1).isalnum():
                continue  # `usersession=`: a word, not the cookie
            if _test_cookie(text, m.end()):
                continue
        if char_classes(value) >= 2 and not is_placeholder(value):
            yield Span(m.start(), m.start() + len(value), kind)
