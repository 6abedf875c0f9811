"""Secret detectors behind redaction: compiled patterns, trigger substrings and validators.

`find_secrets(text)` returns the spans of the secrets in a text, non-overlapping and in order.
A span covers the secret only (the password of a URL, the value of `API_KEY=...`), so the text
around it keeps its shape. Speed comes from `re` itself: patterns that start with a literal are
scanned at memory speed, the few others run only when a trigger substring occurs, and short
texts pass one combined gate first.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple


class Span(NamedTuple):
    """A secret found in a text: `text[start:end]`, of a kind such as `openai_key`."""

    start: int
    end: int
    kind: str


PLACEHOLDER_RE = re.compile(r"<SECRET:[a-z_]+:\d+>")
"""A placeholder written by redaction; never detected as (part of) a secret again."""

_PLACEHOLDER_WORDS = frozenset(
    (
        "password", "passwd", "secret", "token", "none", "null", "nil", "true", "false",
        "undefined", "required", "optional", "str", "string", "bytes", "int", "env", "default",
        "empty", "value", "key", "apikey", "api_key", "test", "testing", "todo", "tbd", "n/a",
        "hidden", "masked", "sensitive", "redacted", "changeme", "placeholder", "dummy", "sample",
        "pass", "pwd", "pw", "foo", "bar", "baz",
    )
)  # fmt: skip
_PLACEHOLDER_PARTS = (
    "your", "example", "placeholder", "changeme", "change_me", "change-me", "redacted",
    "dummy", "xxxx", "****", "...", "${", "{{", "_here", "-here", "<secret:",
)  # fmt: skip
_MASK_CHARS = frozenset("xX*.-_#?0•")


def is_placeholder(value: str) -> bool:
    """A value that stands for a secret without being one (`YOUR_API_KEY`, `$TOKEN`, `xxx`)."""
    if not value or value[0] in "$%{<[*#@&":
        return True
    if set(value) <= _MASK_CHARS:
        return True
    low = value.lower()
    return low in _PLACEHOLDER_WORDS or any(p in low for p in _PLACEHOLDER_PARTS)


def char_classes(value: str) -> int:
    """How many of lower case, upper case, digits and symbols (not `_`) a value mixes."""
    lower = upper = digit = symbol = False
    for c in value:
        if c.islower():
            lower = True
        elif c.isupper():
            upper = True
        elif c.isdigit():
            digit = True
        elif c != "_":
            symbol = True
    return lower + upper + digit + symbol


_ALNUM_RUN = re.compile(r"[A-Za-z0-9]{16,}")


def _random_run(token: str) -> bool:
    """Holds a 16+ character alphanumeric run mixing two classes: random, not words."""
    return any(char_classes(run) >= 2 for run in _ALNUM_RUN.findall(token))


def _random_body(token: str) -> bool:
    """For short tokens with separators (`glpat-Dqw6-ljZXp8vMPPFwQJc`): the body is random."""
    body = token.split("-", 1)[-1].replace("-", "").replace("_", "").split(".", 1)[0]
    return len(body) >= 16 and char_classes(body) >= 2


def _mixed_case(token: str) -> bool:
    return any(c.islower() for c in token) and any(c.isupper() for c in token)


def _many_digits(token: str) -> bool:
    return sum(c.isdigit() for c in token) >= 6


def _jwt_header(token: str) -> bool:
    """The first part decodes to a JSON object with `alg`: a JWT, not any dotted base64."""
    header = token.split(".", 1)[0]
    try:
        data = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    except (ValueError, binascii.Error):
        return False
    return isinstance(data, dict) and "alg" in data


def _at_boundary(text: str, start: int) -> bool:
    """A token starts here: after a non-word character, or right after a JSON escape.

    Tool-call arguments are JSON text, where a key at the start of a line follows a literal
    backslash-n. (Checked here, not in a lookbehind: a pattern that starts with a literal is
    scanned many times faster by `re`.)
    """
    if start == 0:
        return True
    before = text[start - 1]
    if not (before.isalnum() or before in "_-"):
        return True
    return before in "nrt" and start >= 2 and text[start - 2] == "\\"


class _Token(NamedTuple):
    kind: str
    pattern: re.Pattern[str]
    check: Callable[[str], bool] | None


_TOKEN_END = r"(?![A-Za-z0-9_\-])"

# Provider tokens with a recognisable prefix; every pattern starts with a literal.
_TOKENS = (
    _Token("anthropic_key", re.compile(r"sk-ant-[A-Za-z0-9_\-]{20,}"), _random_run),
    _Token("openai_key", re.compile(r"sk-(?!ant-)[A-Za-z0-9_\-]{20,}"), _random_run),
    _Token(
        "github_token",
        re.compile(r"g(?:h[pousr]_[A-Za-z0-9]{36,251}|ithub_pat_\w{22,255})" + _TOKEN_END),
        _random_run,
    ),
    _Token(
        "gitlab_token",
        re.compile(r"gl(?:pat|dt|rt|ptt|cbt|ft)-[A-Za-z0-9_\-]{20,}(?:\.[A-Za-z0-9]{2,}){0,2}"),
        _random_body,
    ),
    _Token("slack_token", re.compile(r"x(?:ox[abposre]-|app-\d-)[A-Za-z0-9\-]{10,}"), _many_digits),
    _Token("google_api_key", re.compile(r"AIza[0-9A-Za-z_\-]{35}" + _TOKEN_END), None),
    _Token("hf_token", re.compile(r"hf_[A-Za-z0-9]{30,40}" + _TOKEN_END), _mixed_case),
    # Publishable keys (pk_live_/pk_test_) ship in web pages by design: not secrets.
    _Token("stripe_key", re.compile(r"sk_(?:live|test)_[0-9A-Za-z]{10,247}"), _random_run),
    _Token("stripe_key", re.compile(r"rk_(?:live|test)_[0-9A-Za-z]{10,247}"), _random_run),
    _Token("stripe_key", re.compile(r"whsec_[A-Za-z0-9+/]{20,}"), _random_run),
    _Token(
        "jwt",
        re.compile(r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{8,}" + _TOKEN_END),
        _jwt_header,
    ),
)


def _find_tokens(text: str) -> Iterator[Span]:
    for d in _TOKENS:
        for m in d.pattern.finditer(text):
            value = m.group()
            if (
                _at_boundary(text, m.start())
                and (d.check is None or d.check(value))
                and not is_placeholder(value)
            ):
                yield Span(m.start(), m.end(), d.kind)


# AWS access key ids are base32 after a fixed prefix; the secret key has no prefix, so it is
# taken only next to an id (credentials CSV, `aws configure` prompts) or after a key name.
_AWS_ID = re.compile(r"A(?:KI|SI)A[A-Z0-9]{16}(?![A-Za-z0-9])")
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_AWS_CONTEXT = re.compile(r"(?i)aws|access|key|secret|session|credential")


def _aws_secret_shape(value: str) -> bool:
    return _mixed_case(value) and any(c.isdigit() or c in "/+" for c in value)


def _find_aws(text: str) -> Iterator[Span]:
    for m in _AWS_ID.finditer(text):
        key = m.group()
        if text[m.start() - 1 : m.start()].isalnum() and not _at_boundary(text, m.start()):
            continue
        # ASIA without digits could be a word run (ASIAPACIFICSOUTHEAST): ask for context.
        wordlike = key.startswith("ASIA") and not any(c.isdigit() for c in key)
        if wordlike and not _AWS_CONTEXT.search(text, max(0, m.start() - 80), m.end() + 80):
            continue
        if is_placeholder(key):
            continue
        yield Span(m.start(), m.end(), "aws_key")
        near = _AWS_SECRET.search(text, m.end(), m.end() + 200)
        if near and _aws_secret_shape(near.group()) and not is_placeholder(near.group()):
            yield Span(near.start(), near.end(), "aws_secret")


_PK_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_PK_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_PK_BODY = re.compile(r"(?:[ \t]*(?:\r?\n|\\r\\n|\\n)[ \t]*[A-Za-z0-9+/=]{16,})+")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{32,}")


def _find_private_keys(text: str) -> Iterator[Span]:
    for m in _PK_BEGIN.finditer(text):
        end = _PK_END.search(text, m.end(), m.end() + 20_000)
        body_text = text[m.end() : end.start()] if end else ""
        if end and '"' not in body_text and "\0" not in body_text:  # one string, one field
            stop = end.end()
        else:  # a truncated block (`head`, an output limit): the base64 lines that follow
            body = _PK_BODY.match(text, m.end())
            stop = body.end() if body else m.end()
        if _BASE64_RUN.search(text, m.end(), stop):
            yield Span(m.start(), stop, "private_key")


_SLACK_HOOK = re.compile(
    r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/\-]{20,})"
)


def _find_slack_webhooks(text: str) -> Iterator[Span]:
    for m in _SLACK_HOOK.finditer(text):
        path = m.group(1)
        if char_classes(path) >= 2 and not is_placeholder(path):
            yield Span(m.start(1), m.end(1), "slack_webhook")


_URL_PASSWORD = re.compile(r"://([^\s:/@\"'<>\\?#]*):([^\s/\"'<>\\?#]+)@(?=[A-Za-z0-9\[])")


def _find_url_passwords(text: str) -> Iterator[Span]:
    for m in _URL_PASSWORD.finditer(text):
        if not is_placeholder(m.group(2)) and m.group(2) != m.group(1):
            yield Span(m.start(2), m.end(2), "url_password")


_AUTH_VALUE = r"[ \t]+([A-Za-z0-9._~+/\-]{16,}={0,2})(?![A-Za-z0-9._~+/=\-])"
_AUTH = (  # (pattern, letter that must precede it); literal-led for a fast scan
    (re.compile(r"earer" + _AUTH_VALUE), "Bb"),
    (re.compile(r"EARER" + _AUTH_VALUE), "B"),
    (
        re.compile(
            r"uthorization[\"']?\]?[ \t]*[:=][ \t]*[\"']?(?:[Bb]asic|BASIC|[Tt]oken|TOKEN)"
            + _AUTH_VALUE
        ),
        "Aa",
    ),
)


def _find_auth_headers(text: str) -> Iterator[Span]:
    for pattern, initial in _AUTH:
        for m in pattern.finditer(text):
            value = m.group(1)
            if (
                text[m.start() - 1 : m.start()] in tuple(initial)
                and _at_boundary(text, m.start() - 1)
                and char_classes(value) >= 2
                and not is_placeholder(value)
            ):
                yield Span(m.start(1), m.end(1), "auth_header")


# Key/value forms anchored on the secret word that ends the key name: `DB_PASSWORD=...`,
# `export GITHUB_TOKEN="..."`, `"api_key": "..."`, `password: ...`, `--token=...`. The scan
# looks for the words only (a case-sensitive alternation of literals is fast in `re`); the
# rest is matched at each hit.
_KV_ANCHOR = re.compile(
    r"key|token|secret|pass|pwd|cred|Key|Token|Secret|Pass|Cred|KEY|TOKEN|SECRET|PASS|PWD|CRED"
)
_KV_TAIL = re.compile(
    r"(?i)(?:passphrase|password|passwd|pass|pwd|secret[_\-]?key|secret|token|credentials?|creds"
    r"|key)\d*(\\?[\"'])?\]?[ \t]*(:=|=>|=|:)[ \t]*(\\?[\"'])?"
)
_KEY_PREFIX = re.compile(
    r"(?i)(?:api|access|private|signing|encryption|master|session|license|account|app|client"
    r"|consumer|auth)[_\-]?$"
)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_UNQUOTED = re.compile(r"[^\s\"'\\`,;&|<>(){}\[\]]{1,257}")
_IDENTIFIER = re.compile(r"[A-Za-z_$]\w*(?:\.[A-Za-z_$]\w*)*")
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})


def _name_start(text: str, word_start: int) -> int | None:
    """Start of the key name that ends in the word at `word_start`, or None if no boundary."""
    before = text[word_start - 1] if word_start else ""
    first = text[word_start]
    escaped = word_start >= 2 and text[word_start - 2] == "\\" and before in "nrt"
    head = text[word_start : word_start + 5]
    # The word must begin a segment: after a separator, a camelCase hump (`clientSecret`), or
    # in a run of capitals when it is long enough not to be part of a word (`PGPASSWORD`).
    if (
        before.isalnum()
        and not escaped
        and not (before.islower() and first.isupper())
        and not (before.isupper() and head.isalpha() and head.isupper())
    ):
        return None
    start = word_start
    while start > word_start - 128 and start and text[start - 1] in _NAME_CHARS:
        start -= 1
    if start >= 1 and text[start - 1] == "\\" and text[start] in "nrt":
        start += 1  # a JSON escape ("\nPASSWORD=...") is not part of the name
    if start and text[start - 1] in "${%":
        return None  # a reference (`${PASSWORD:-x}`), not an assignment
    return start


def _kv_value(text: str, pos: int, quote: str | None) -> tuple[int, int] | None:
    if quote:
        close = text.find(quote, pos, pos + 256)
        if close <= pos:
            return None
        value = text[pos:close]
        after = text[close + len(quote) : close + len(quote) + 1]
        if "\n" in value or "\\" in value or quote[-1] in value or value[0] in " \t),;+":
            return None
        if after and (after.isalnum() or after == "("):
            return None  # the quote closed something else (`getpass("Password: ")`)
        return pos, close
    m = _UNQUOTED.match(text, pos)
    if not m or len(m.group()) > 256 or text[m.end() : m.end() + 1] in ("(", "["):
        return None  # a call or subscript, not a literal (or no value at all)
    return pos, m.end()


# Values that name something rather than hold a secret: `NextToken`, `hashedPassword`,
# `THE_AWS_SECRET_ACCESS_KEY`, `s3.secret-access-key`, `no-password-required`.
_NAMING = re.compile(
    r"[a-z]+(?:[A-Z][a-z]*)+|(?:[A-Z][a-z]+){2,}|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+"
    r"|[A-Za-z][a-z]{0,11}\d{0,2}(?:[-_.][A-Za-z][a-z]{0,11}\d{0,2})+"
    r"|[A-Za-z_]+(?:\.[A-Za-z_]+)+"
)
# Tokens that only order or deduplicate requests (`NextToken`, `ClientRequestToken`).
_NOT_SECRET_TOKENS = re.compile(
    r"(?i)(?:next|page|pagination|continuation|forward|backward|start|starting|sync|lock|change"
    r"|request|idempotency|cancel|resume)[_\-]?token$"
)


def _random_enough(value: str) -> bool:
    digits = sum(c.isdigit() for c in value)
    return len(value) >= 16 and (
        char_classes(value) >= 3 or (digits >= 4 and len(value) - digits >= 4 and "_" not in value)
    )


def _value_is_secret(value: str, word: str, literal: bool, sep: str) -> bool:
    """Whether the value of a secret-named key is a secret itself, not a name or a reference.

    `literal` values (quoted, `ENV=value`, `--flag=value`, `?query=value`) are taken as written;
    others (code, YAML, prose: `token = get_token`, `password: str`) must look random.
    """
    if len(value) < 4 or is_placeholder(value) or _NAMING.fullmatch(value):
        return False
    if value[0] == "!" and value[1:].isalpha():
        return False  # a YAML tag: `password: !vault |`, `Password: !Ref DbPassword`
    if (
        any(c.isspace() for c in value)
        or "://" in value
        or value.startswith(("arn:", "/", "~", "."))
    ):
        return False
    if not literal:
        if len(value) < 6 or value.isdigit() or char_classes(value) < 2:
            return False
        # `secret_key = s3_connection` is code; `password: hunter2` is YAML; `_authToken=dDy…`
        # in .npmrc is random enough to be a value whatever the syntax.
        code_like = sep != ":" or not any(c.isdigit() for c in value)
        if (
            code_like
            and _IDENTIFIER.fullmatch(value)
            and ("." in value or not _random_enough(value))
        ):
            return False
    if not word.startswith(("pass", "pwd")) and value.isalpha():
        return False  # keys and tokens are random strings, never a plain word
    return "token" not in word or (len(value) >= 8 and char_classes(value) >= 2)


def _find_key_values(text: str) -> Iterator[Span]:
    for anchor in _KV_ANCHOR.finditer(text):
        m = _KV_TAIL.match(text, anchor.start())
        if m is None:
            continue
        word_start = m.start()
        if anchor.group().lower() == "key":  # only `api_key`, `ACCESS_KEY`, `clientKey`, ...
            prefix = _KEY_PREFIX.search(text, max(0, word_start - 14), word_start)
            if prefix is None:
                continue
            word_start = prefix.start()
        name_start = _name_start(text, word_start)
        if name_start is None:
            continue
        name = text[name_start : m.start(1) if m.group(1) else m.start(2)].rstrip("]\"' \t")
        key_quote, sep, quote = m.group(1), m.group(2), m.group(3)
        if sep == ":" and not key_quote and not quote and not text[m.end(2) : m.end()]:
            continue  # YAML wants a space after the colon; `user:pass` is not a key
        found = _kv_value(text, m.end(), quote)
        if (
            found is None
            or name.lstrip("-") in _NOT_SECRET_NAMES
            or _NOT_SECRET_TOKENS.search(name)
            or text[name_start - 2 : name_start] == "::"  # a type path: AWS::IAM::AccessKey
        ):
            continue
        start, end = found
        literal = (
            bool(quote)
            or name.startswith("-")
            or text[name_start - 1 : name_start] in ("?", "&", ";")  # query, connection string
            or (sep == "=" and name == name.upper())
        )
        if not literal:
            end = start + len(text[start:end].rstrip(".:,"))
        value = text[start:end]
        word = text[word_start : m.end()].lower()
        if value.lower() == name.lstrip("-").lower() or not _value_is_secret(
            value, word, literal, sep
        ):
            continue
        upper = name.upper()
        if "SECRET" in upper and ("ACCESS" in upper or "AWS" in upper) and len(value) == 40:
            kind = "aws_secret"
        elif word.startswith(("pass", "pwd")):
            kind = "password"
        else:
            kind = "secret"
        yield Span(start, end, kind)


# Name and value as sibling fields: Kubernetes `env:` lists, ECS task definitions.
_Q = r"(?:\\?[\"'])?"  # an optional quote, maybe JSON-escaped
_ENV_ENTRY = re.compile(
    r"name" + _Q + r"[ \t]*:[ \t]*" + _Q + r"([A-Za-z_][\w.\-]*)" + _Q
    + r"[ \t]*,?[ \t]*(?:\r?\n[ \t]*(?:-[ \t]*)?)?" + _Q + r"value" + _Q
    + r"[ \t]*:[ \t]*(\\?[\"'])?"
)  # fmt: skip
_SECRET_NAME = re.compile(
    r"(?i)(?:^|[_\-.])(passphrase|password|passwd|pass|pwd|secret|token|credentials?|creds"
    r"|(?:api|access|private|secret|signing|encryption|master|session|client|auth)[_\-]?key)\d*$"
)


def _find_env_entries(text: str) -> Iterator[Span]:
    for m in _ENV_ENTRY.finditer(text):
        name, quote = m.group(1), m.group(2)
        word = _SECRET_NAME.search(name)
        found = _kv_value(text, m.end(), quote) if word else None
        if word is None or found is None or _NOT_SECRET_TOKENS.search(name):
            continue
        value = text[found[0] : found[1]]
        if value.lower() != name.lower() and _value_is_secret(
            value, word.group(1).lower(), True, "="
        ):
            kind = "password" if word.group(1).lower().startswith(("pass", "pwd")) else "secret"
            yield Span(found[0], found[1], kind)


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
_NO_REPLY = frozenset({"git", "noreply", "no-reply", "donotreply", "do-not-reply"})
_SSH_CONTEXT = re.compile(r"\b(?:ssh|scp|sftp|rsync|mosh|ssh-copy-id|autossh)\b[^\n|;&]*$")


def _find_emails(text: str) -> Iterator[Span]:
    for m in _EMAIL.finditer(text):
        domain, tld = m.group(1).lower(), m.group(2).lower()
        if not ((len(tld) == 2 and tld not in _FILE_TLDS) or tld in _TLDS):
            continue
        start = m.start()
        while start > max(0, m.start() - 64) and text[start - 1] in _LOCAL_CHARS:
            start -= 1
        if start >= 1 and text[start - 1] == "\\":
            start += 1  # "\nbob@..." in JSON text: the n belongs to the escape
        while start < m.start() and text[start] == ".":
            start += 1
        local = text[start : m.start()].lower()
        follow = text[m.end() : m.end() + 2]
        if not local or local in _NO_REPLY or domain.endswith(_EXAMPLE_DOMAINS):
            continue
        labels = domain.split(".")
        if local.startswith("your") or any(x == "example" or x.startswith("your") for x in labels):
            continue  # you@your-domain.com, jane@mail.example
        if len(follow) == 2 and follow[0] == ":" and not follow[1].isspace():
            continue  # scp-like `user@host:path`, `git@github.com:org/repo`
        line_start = max(text.rfind("\n", 0, start) + 1, start - 200)  # bounded: no O(n²)
        token_start = max(text.rfind(" ", line_start, start), line_start)
        if "://" in text[token_start:start] or _SSH_CONTEXT.search(text, line_start, start):
            continue  # URL user info or an ssh login, not an address
        yield Span(start, m.end(), "email")


# (priority, triggers, finder): a finder runs only if a trigger occurs (None: its patterns start
# with literals and scan as fast as `in`). On overlap the lower priority number wins, so the
# value of `OPENAI_API_KEY=sk-...` is an `openai_key`, not a generic `secret`.
_FINDERS: tuple[tuple[int, tuple[str, ...] | None, Callable[[str], Iterator[Span]]], ...] = (
    (0, ("PRIVATE KEY",), _find_private_keys),
    (0, None, _find_tokens),
    (0, ("hooks.slack.com",), _find_slack_webhooks),
    (1, None, _find_aws),
    (1, None, _find_url_passwords),
    (2, ("earer", "EARER", "uthorization", "UTHORIZATION"), _find_auth_headers),
    (2, None, _find_key_values),
    (2, ("value",), _find_env_entries),
    (3, ("@",), _find_emails),
)

# Most fields are short (ids, names, one-line values): for them one scan for any trigger is
# cheaper than a call per detector.
_SHORT = 384
_GATE = re.compile(
    r"sk-|[sr]k_|gh[pousr]_|github_pat_|gl(?:pat|dt|rt|ptt|cbt|ft)-|xox|xapp-|AIza|hf_|whsec_"
    r"|eyJ|AKIA|ASIA|PRIVATE KEY|hooks\.slack|://|earer|EARER|uthorization|UTHORIZATION|@|"
    + _KV_ANCHOR.pattern
)

KINDS: tuple[str, ...] = (
    "openai_key", "anthropic_key", "aws_key", "aws_secret", "github_token", "gitlab_token",
    "slack_token", "slack_webhook", "google_api_key", "hf_token", "stripe_key", "private_key",
    "jwt", "url_password", "auth_header", "password", "secret", "email",
)  # fmt: skip
"""Every placeholder kind, in documentation order."""


def _unescaped_backslash(text: str, index: int) -> bool:
    """`text[index]` is a backslash that escapes the next character."""
    n = 0
    while index - n >= 0 and text[index - n] == "\\":
        n += 1
    return n % 2 == 1


class Intervals:
    """Disjoint `[start, end)` intervals with a logarithmic overlap test."""

    def __init__(self, intervals: Iterable[tuple[int, int]] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for start, end in intervals:
            self.add(start, end)

    def overlaps(self, start: int, end: int) -> bool:
        """Whether `[start, end)` overlaps an interval held."""
        i = bisect.bisect_right(self._starts, start)
        if i and self._ends[i - 1] > start:
            return True
        return i < len(self._starts) and self._starts[i] < end

    def add(self, start: int, end: int) -> None:
        """Hold `[start, end)`, which must not overlap an interval held."""
        i = bisect.bisect_right(self._starts, start)
        self._starts.insert(i, start)
        self._ends.insert(i, end)


def find_secrets(text: str) -> list[Span]:
    """The secrets in `text`: non-overlapping spans in order; placeholders are never matched."""
    if len(text) < _SHORT and (len(text) < 6 or not _GATE.search(text)):
        return []
    candidates: list[tuple[int, Span]] = []
    for priority, triggers, finder in _FINDERS:
        if triggers is None or any(t in text for t in triggers):
            candidates.extend((priority, span) for span in finder(text))
    if not candidates:
        return []
    taken = Intervals((m.start(), m.end()) for m in PLACEHOLDER_RE.finditer(text))
    chosen: list[Span] = []
    for _, span in sorted(candidates, key=lambda c: (c[0], c[1].start, -c[1].end)):
        start, end, kind = span
        # Never split a JSON escape: the text may be JSON (tool-call arguments) and must stay so.
        if start and _unescaped_backslash(text, start - 1):
            start += 5 if text[start] == "u" else 1
        while end > start and _unescaped_backslash(text, end - 1):
            end -= 1
        if end <= start or taken.overlaps(start, end):
            continue
        taken.add(start, end)
        chosen.append(Span(start, end, kind))
    return sorted(chosen)
