"""Credentials in the URLs that name a source: the password of the user info, and query
parameters that sign or authorise a request (presigned S3, Azure SAS, OAuth), before a URL is
stored (`source_uri`) or named in a report.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import unquote_plus

from trajlake.redact._patterns import PLACEHOLDER_RE, find_secrets

__all__ = ["SENSITIVE_QUERY_KEYS", "redact_uri"]

SENSITIVE_QUERY_KEYS = frozenset(
    {
        "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature",
        "x-goog-credential", "signature", "sig", "token", "access_token", "id_token",
        "refresh_token", "auth", "key", "api_key", "apikey", "code", "password", "secret",
        "client_secret",
    }
)  # fmt: skip
"""Query parameters whose values are replaced (compared case-insensitively, URL-decoded)."""

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")


def _userinfo_password(uri: str, start: int) -> tuple[int, int] | None:
    """The span of the password in `scheme://user:password@host…`, `start` after `://`.

    The user info ends at the last `@` before the path: a password may hold `#`, `?` or `@`
    unencoded (clients accept it), and cutting it there would leave its tail in clear.
    """
    slash = uri.find("/", start)
    stop = len(uri) if slash < 0 else slash
    at = uri.rfind("@", start, stop)
    if at < 0:
        return None
    colon = uri.find(":", start, at)
    if colon < 0 or colon + 1 == at:
        return None
    return colon + 1, at


def _query_spans(uri: str, start: int) -> list[tuple[int, int]]:
    """Spans of the values of sensitive query parameters (query begins after `start`)."""
    question = uri.find("?", start)
    if question < 0:
        return []
    end = uri.find("#", question)
    end = len(uri) if end < 0 else end
    spans = []
    pos = question + 1
    items = uri[question + 1 : end].split("&")
    for n, item in enumerate(items, 1):
        key, sep, _ = item.partition("=")
        if sep and unquote_plus(key).strip().lower() in SENSITIVE_QUERY_KEYS:
            value_start = pos + len(key) + 1
            # A `#` in a last, secret value is more likely part of it than a fragment.
            value_end = len(uri) if n == len(items) else pos + len(item)
            if value_start < value_end:
                spans.append((value_start, value_end))
        pos += len(item) + 1
    return spans


@functools.lru_cache(maxsize=1024)  # one call per stored record: a file's URL recurs
def redact_uri(uri: str) -> str:
    """`uri` with its credentials replaced by placeholders; the rest kept as written.

    Replaced: the password of the user info (`<SECRET:url_password:1>`), the values of query
    parameters in `SENSITIVE_QUERY_KEYS` (`<SECRET:url_signature:n>` for what the detectors
    know as a signature, else `<SECRET:secret:n>`), and anything the secret
    detectors find in the rest (a token in the path). Local paths without secrets come back
    unchanged (the same object).
    """
    detected = find_secrets(uri)
    spans: list[tuple[int, int, str]] = []
    scheme = _SCHEME.match(uri)
    if scheme is not None:
        password = _userinfo_password(uri, scheme.end())
        if password is not None:
            spans.append((*password, "url_password"))
        after = password[1] if password is not None else scheme.end()
        for start, end in _query_spans(uri, after):
            # The detectors' kind where they see one (`url_signature`), as in any other text.
            kinds = [f.kind for f in detected if f.start < end and start < f.end]
            spans.append((start, end, kinds[0] if kinds else "secret"))
    taken = [(s, e) for s, e, _ in spans]
    for found in detected:
        if not any(found.start < e and s < found.end for s, e in taken):
            spans.append((found.start, found.end, found.kind))
    spans = [s for s in spans if not PLACEHOLDER_RE.fullmatch(uri[s[0] : s[1]])]
    if not spans:
        return uri
    numbers: dict[str, dict[str, int]] = {}
    pieces: list[str] = []
    last = 0
    for start, end, kind in sorted(spans):
        seen = numbers.setdefault(kind, {})
        number = seen.setdefault(uri[start:end], len(seen) + 1)
        pieces += (uri[last:start], f"<SECRET:{kind}:{number}>")
        last = end
    pieces.append(uri[last:])
    return "".join(pieces)
