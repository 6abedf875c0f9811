"""Secrets on command lines and in files an agent prints: `-`-led provider tokens, `mysql -p…`,
`redis-cli -a`, `curl -u user:password`, `sshpass -p`, PuTTY keys, base64-encoded `.env` files.

They share one scan for `-` with the `-`-prefixed provider formats of `_providers` (`sk-`,
`glpat-`, `xoxb-`, …): a long text is scanned once for all of them, and the Python loop runs
only where the scan's lookarounds name a prefix, a flag or a command.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator

from trajlake.redact._base import Span, at_boundary, is_placeholder, strong
from trajlake.redact._gate import gate
from trajlake.redact._prefilter import relaxed, unled
from trajlake.redact._providers import DASH_RULES, hex_mix, match_rules, scanner

# What a match of `find_dash_forms` needs (`_gate`): a rule's prefix, or the words of a form.
DASH_GATE = gate(
    *(rule.prefix[:2] + "-" for rule in DASH_RULES), "base64 -", "mysql -p", "redis-cli -a",
    "curl -u", "-us", "-Private-Lines:",
)  # fmt: skip


# The `-` scan also stops at `base64 -d` (an encoded .env), at a glued `-p<password>`, at
# `-a <password>` and `-u <user:password>` (redis-cli, curl), at a Mailchimp key's `-us`, and
# at the header of a PuTTY private key (`PuTTY-User-Key-File-3:`).
_DASH_SCAN = scanner(
    "-",
    DASH_RULES,
    r"(?=[A-Za-z0-9_][\w\-]{9})",
    r"(?<=base64 -)|(?<=[ \t]-)(?=p[^\s\-]|[au][ \t])|(?=us\d)(?<=[0-9a-f]{32}-)"
    r"|(?=[123]: )(?<=PuTTY-User-Key-File-)|",
)


# What `find_dash_forms` needs somewhere in a text to find anything (a prefilter, see
# `_prefilter`): a rule's whole pattern, or the command and its option on one line.
DASH_PREFILTER = "|".join(
    (
        *dict.fromkeys(unled(relaxed(rule.pattern.pattern)) for rule in DASH_RULES),
        r"base64 -",
        r"mysql[^\n]*[ \t]-p",
        r"redis-cli[^\n]*[ \t]-a[ \t]",
        r"curl[^\n]*[ \t]-u[ \t]",
        r"-us\d",  # a Mailchimp key's data centre, after 32 hex
        r"PuTTY-User-Key-File-[123]: ",
    )
)


def _line(text: str, pos: int, reach: int) -> tuple[int, int]:
    """The line around `pos`, at most `reach` characters each way."""
    low, high = max(0, pos - reach), min(len(text), pos + reach)
    end = text.find("\n", pos, high)
    return max(low, text.rfind("\n", low, pos) + 1), end if end >= 0 else high


def find_dash_forms(text: str, secrets_in: Callable[[str], bool]) -> Iterator[Span]:
    """Tokens with a `-` prefix (`sk-`, `glpat-`, `xoxb-`, …), `mysql -p…`, base64 `.env` blobs.

    `secrets_in(decoded)` says whether a decoded blob holds a secret.
    """
    done = decoded_to = 0
    for hit in _DASH_SCAN.finditer(text):
        dash = hit.start()
        if dash < done:
            continue  # inside a token found already
        span = match_rules(text, hit.end(), DASH_RULES)
        if span is None and text[dash - 7 : dash] == "base64 ":
            start, end = _line(text, dash, 4096)
            if end > decoded_to:  # each stretch of text is decoded once
                yield from _encoded_env(text, max(start, decoded_to), end, secrets_in)
                decoded_to = end
        elif span is None:
            flag = text[dash + 1 : dash + 2]
            if flag == "p":
                span = _mysql_password(text, dash)
            elif flag == "a":
                span = _redis_password(text, dash)
            elif flag == "u" and text[dash + 2 : dash + 3] in (" ", "\t"):
                span = _curl_password(text, dash)
            elif flag == "u":
                span = _mailchimp(text, dash)
            elif flag in "123":
                span = _putty_key(text, dash - 19)
        if span is not None:
            done = span.end
            yield span


_MYSQL = re.compile(r"mysql(?:dump|admin|import|show|check|slap)?(?![\w\-])")
_GLUED = re.compile(r"(['\"])([^'\"\s]+)\1|([^\s'\"]+)")
_SSHPASS = re.compile(r"sshpass[ \t]+-p[ \t]*(?:(['\"])([^'\"\n]+)\1|([^\s'\"]+))")


def _command_password(m: re.Match[str]) -> Span | None:
    """The quoted (group 2) or bare (group 3) password of a command match."""
    group = 2 if m.group(2) is not None else 3
    value = m.group(group)
    if is_placeholder(value) or value.startswith(("-", "$", "`")) or len(value) < 3:
        return None
    return Span(m.start(group), m.end(group), "password")


def _mysql_password(text: str, dash: int) -> Span | None:
    """`mysql -p<password>` (and mysqldump, mysqladmin, …): the password glued to `-p`."""
    start, _ = _line(text, dash, 512)
    at = text.rfind("mysql", start, dash)
    if at < 0 or not _MYSQL.match(text, at) or any(c in text[at:dash] for c in "|;&"):
        return None  # no mysql command before this `-p` in the same command
    m = _GLUED.match(text, dash + 2)
    return _command_password(m) if m else None


# PuTTY `.ppk` files: a header, the public lines, then `Private-Lines: N` and the key.
_PPK_PRIVATE = re.compile(r"Private-Lines: \d+")
_PPK_BODY = re.compile(r"(?:[ \t]*(?:\r?\n|\\r\\n|\\n)[ \t]*[A-Za-z0-9+/=]{16,})+")
_PPK_MAC = re.compile(r"(?:\r?\n|\\r\\n|\\n)Private-(?:MAC|Hash): [0-9a-fA-F]+")
_BASE64_LINE = re.compile(r"[A-Za-z0-9+/]{32,}")


def _putty_key(text: str, start: int) -> Span | None:
    """A PuTTY private key, from its header through its `Private-MAC` line."""
    private = _PPK_PRIVATE.search(text, start, start + 20_000)
    if private is None or not at_boundary(text, start):
        return None
    body = _PPK_BODY.match(text, private.end())
    stop = body.end() if body else private.end()
    mac = _PPK_MAC.match(text, stop)
    if mac is not None:
        stop = mac.end()
    if _BASE64_LINE.search(text, private.end(), stop) is None:
        return None
    return Span(start, stop, "private_key")


def _command_before(text: str, dash: int, command: re.Pattern[str], word: str) -> bool:
    """`command` runs on this line before the option at `dash`, with no `|`, `;`, `&` between."""
    start, _ = _line(text, dash, 512)
    at = text.rfind(word, start, dash)
    return (
        at >= 0
        and command.match(text, at) is not None
        and not any(c in text[at:dash] for c in "|;&")
    )


_REDIS_CLI = re.compile(r"redis-cli(?![\w\-])")
_CURL = re.compile(r"curl(?![\w\-])")
_SPACED = re.compile(r"[ \t]+(?:(['\"])([^'\"\s]+)\1|([^\s'\"]+))")
_CURL_USER = re.compile(r"[ \t]+(['\"]?)([^\s:'\"$`]{1,128}):([^\s'\"]{1,1024})\1(?=\s|$)")
_TRY_HOST = re.compile(r"[^\n]{0,512}?(?:example\.(?:com|org|net)|localhost|127\.0\.0\.1)")


def _redis_password(text: str, dash: int) -> Span | None:
    """`redis-cli -a <password>`: the password after `-a`."""
    if not _command_before(text, dash, _REDIS_CLI, "redis-cli"):
        return None
    m = _SPACED.match(text, dash + 2)
    return _command_password(m) if m else None


def _curl_password(text: str, dash: int) -> Span | None:
    """`curl -u user:password`: the password; the user stays. `-u user` alone prompts."""
    if not _command_before(text, dash, _CURL, "curl"):
        return None
    m = _CURL_USER.match(text, dash + 2)
    if m is None:
        return None
    value = m.group(3)
    if is_placeholder(value) or value.startswith(("$", "`")) or len(value) < 4:
        return None
    if not strong(value) and _TRY_HOST.match(text, m.end()):
        return None  # `curl -u user:pass http://localhost:9200`: a documented example
    return Span(m.start(3), m.end(3), "password")


_MAILCHIMP = re.compile(r"[0-9a-f]{32}-us\d{1,2}(?![A-Za-z0-9])")


def _mailchimp(text: str, dash: int) -> Span | None:
    """A Mailchimp API key: 32 hex, then the data centre (`-us14`)."""
    start = dash - 32
    m = _MAILCHIMP.match(text, start) if start >= 0 else None
    if m is None or not at_boundary(text, start) or not hex_mix(m.group()[:32]):
        return None
    return Span(start, m.end(), "mailchimp_key")


def sshpass_password(text: str, start: int) -> Span | None:
    """`sshpass -p <password>` starting at `start`, if it is one."""
    m = _SSHPASS.match(text, start)
    return _command_password(m) if m else None


_B64_RUN = re.compile(r"[A-Za-z0-9+/]{24,}={0,2}")
_ENV_LINE = re.compile(rb"(?m)^(?:export )?[A-Za-z_][A-Za-z0-9_.\-]*=\S")


def _encoded_env(
    text: str, start: int, end: int, secrets_in: Callable[[str], bool]
) -> Iterator[Span]:
    """Base64 blobs in `text[start:end]` (the line of a `base64 -d`) that decode to `.env`
    lines holding a secret."""
    for m in _B64_RUN.finditer(text, start, end):
        try:
            raw = base64.b64decode(m.group(), validate=True)
        except (ValueError, binascii.Error):
            continue
        if not raw.isascii() or not _ENV_LINE.search(raw):
            continue
        if secrets_in(raw.decode("ascii")) and strong(m.group()):
            yield Span(m.start(), m.end(), "secret")
