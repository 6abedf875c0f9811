"""Key/value forms of secrets: `DB_PASSWORD=…`, `"api_key": "…"`, `--token=…`, k8s env pairs.

The value of a key whose name ends in a secret word (password, token, secret, api_key, …) is
a secret when it looks like one: not a name, a reference, a placeholder, a stored hash or a
fixture in code. A provider named in the key (or a provider's own value shape) types it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

from trajlake.redact._base import (
    Span,
    at_boundary,
    before,
    char_classes,
    is_placeholder,
    mixed_case,
    random_run,
)
from trajlake.redact._commands import sshpass_password
from trajlake.redact._context import fixture, in_path
from trajlake.redact._gate import Gate, admits, gate, rank
from trajlake.redact._prefilter import relaxed

# Key/value forms anchored on the secret word that ends the key name: `DB_PASSWORD=...`,
# `export GITHUB_TOKEN="..."`, `"api_key": "..."`, `password: ...`, `--token=...`. Secret words
# are common in prose and code ("tests pass", "the key"), so the scan keeps only the words a
# rule below can use: followed by a separator within a few letters (`_KV_TAIL` then decides),
# or in one of the positional forms (`sshpass`, `create secret`, `session_token`, NuGet's
# `key oy2…`, `master.key`, `password <value>` in .netrc, a Terraform `variable "…" {` block).
# Lookbehinds come after the literal, so the Python loop runs for about one hit in ten.
# The same anchors find the provider tokens whose prefix holds no separator (Twilio `SK` key
# sids, as in gitleaks, and crates.io `cio` tokens).
_BARE_END = r"(?![A-Za-z0-9_\-])"
_SEP = r"(?=[A-Za-z_\-]{0,8}\d*(?:\\?[\"'])?\]?[ \t]*[:=])"  # `_KV_TAIL` may match here
_BLOCK = r"(?=[^\"]{0,64}\" ?\{)"  # a Terraform block: `"db_password" {`
# Each anchor is one word literal and what may follow it, scanned on its own: `re` finds a
# literal-led pattern at the speed of a plain search, while an alternation of words led by
# common letters is tried at every `s`, `t`, `p`, ... (about twice the cost of all the
# scans below together). A word whose characters do not all occur is not scanned at all
# (`_gate`). At most one anchor matches at a position (the words differ within their
# first two letters), so merging their matches in order, leftmost first and without overlap,
# gives exactly what one alternation of them would (`KV_ANCHOR`, kept as the reference).
_ANCHOR_FORMS = (
    ("key", rf"(?:{_SEP}|(?= oy2)|(?<=master\.key)|(?<=ion_key|ess_key))"),
    ("Key", rf"(?:{_SEP}|(?= oy2)|(?<=master\.Key))"),
    ("KEY", _SEP),
    ("token", rf"(?:{_SEP}|{_BLOCK}|(?<=ion_token|ess_token))"),
    ("Token", rf"(?:{_SEP}|{_BLOCK})"),
    ("TOKEN", rf"(?:{_SEP}|{_BLOCK})"),
    ("secret", rf"(?:{_SEP}|{_BLOCK}|(?<=create secret))"),
    ("Secret", rf"(?:{_SEP}|{_BLOCK})"),
    ("SECRET", rf"(?:{_SEP}|{_BLOCK})"),
    ("SK", rf"[0-9a-fA-F]{{32}}{_BARE_END}"),
    ("pass", rf"(?:{_SEP}|{_BLOCK}|(?<=sshpass)|(?=word ))"),
    ("pwd", rf"(?:{_SEP}|{_BLOCK})"),
    ("Pass", rf"(?:{_SEP}|{_BLOCK})"),
    ("PASS", rf"(?:{_SEP}|{_BLOCK})"),
    ("PWD", rf"(?:{_SEP}|{_BLOCK})"),
    ("cred", _SEP),
    ("cio", rf"[A-Za-z0-9]{{32}}{_BARE_END}"),
    ("Cred", _SEP),
    ("CRED", _SEP),
)
KV_ANCHOR = re.compile("|".join(word + tail for word, tail in _ANCHOR_FORMS))
"""Every key/value anchor as one alternation: what `kv_anchors` yields, scanned slowly."""


def _anchor_scan(forms: list[tuple[str, str]]) -> tuple[Gate, int, re.Pattern[str]]:
    """One scan for the anchors of one first letter. A lone word is led by its rarest letter
    (`re` stops less often: `ken(?<=token)` scans faster than `token`); words that share a
    first letter are one alternation after it (`p(?:ass…|wd…)`: one scan instead of two)."""
    if len(forms) > 1:
        first = forms[0][0][0]
        tails = "|".join(re.escape(word[1:]) + tail for word, tail in forms)
        return gate(*(word for word, _ in forms)), 0, re.compile(f"{first}(?:{tails})")
    word, tail = forms[0]
    lead = min(range(len(word)), key=lambda i: rank(word[i]))
    pattern = re.escape(word[lead:]) + (f"(?<={re.escape(word)})" if lead else "") + tail
    return gate(word), lead, re.compile(pattern)


def _by_first_letter() -> list[list[tuple[str, str]]]:
    groups: dict[str, list[tuple[str, str]]] = {}
    for word, tail in _ANCHOR_FORMS:
        groups.setdefault(word[0], []).append((word, tail))
    return list(groups.values())


_ANCHORS = tuple(_anchor_scan(forms) for forms in _by_first_letter())


class Anchor:
    """A match of `KV_ANCHOR`: the word (or bare token) at `text[start():end()]`."""

    __slots__ = ("_end", "_group", "_start")

    def __init__(self, text: str, start: int, end: int) -> None:
        self._start, self._end, self._group = start, end, text[start:end]

    def start(self) -> int:
        return self._start

    def end(self) -> int:
        return self._end

    def group(self) -> str:
        return self._group


def kv_anchors(text: str) -> Iterator[Anchor]:
    """The matches of `KV_ANCHOR` in `text`, in order and without overlap, found fast."""
    found: list[tuple[int, int]] = []
    for chars, lead, pattern in _ANCHORS:
        if admits(text, chars):
            found.extend((m.start() - lead, m.end()) for m in pattern.finditer(text))
    if len(found) > 1:
        found.sort()
    end = 0
    for start, stop in found:
        if start >= end:
            end = stop
            yield Anchor(text, start, stop)


_BARE_KINDS = {"c": "crates_token", "S": "twilio_key"}


def _bare_token(text: str, anchor: Anchor) -> Span | None:
    """A provider token found by the anchor scan itself (Twilio `SK…`, crates.io `cio…`)."""
    token, start = anchor.group(), anchor.start()
    if not at_boundary(text, start) or is_placeholder(token) or not random_run(token):
        return None
    digits = any(c.isdigit() for c in token[3:])
    if token[0] == "c" and not (digits and mixed_case(token)):
        return None  # a crates.io token mixes cases and digits
    if token[0] == "S" and not (digits and any(c.isalpha() for c in token[2:])):
        return None  # a Twilio key sid is random hex
    return Span(start, anchor.end(), _BARE_KINDS[token[0]])


_KV_TAIL = re.compile(
    r"(?i)(?:passphrase|password|passwd|pass|pwd|secret[_\-]?key|secret|token|credentials?|creds"
    r"|key)\d*(\\?[\"'])?\]?[ \t]*(:=|=>|=|:)[ \t]*(\\?[\"'])?"
)
_KEY_PREFIX = re.compile(
    r"(?i)(?:api|access|private|signing|encryption|master|session|license|account|app|client"
    r"|consumer|auth)[_\-]?$"
)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_MAX_VALUE = 16384  # AWS session tokens run to 1,000+ characters; a bound keeps scans linear
_UNQUOTED = re.compile(r"[^\s\"'\\`,;&|<>(){}\[\]]{1,%d}" % _MAX_VALUE)  # noqa: UP031
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
        line_end = text.find("\n", pos, pos + _MAX_VALUE)  # a quoted value is on one line
        close = text.find(quote, pos, line_end if line_end >= 0 else pos + _MAX_VALUE)
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
    if not m or text[m.end() : m.end() + 1] in ("(", "["):
        return None  # a call or subscript, not a literal (or no value at all)
    return pos, m.end()


# Values that name something rather than hold a secret: `NextToken`, `hashedPassword`,
# `THE_AWS_SECRET_ACCESS_KEY`, `s3.secret-access-key`, `no-password-required`.
_NAMING = re.compile(
    r"[a-z]+(?:[A-Z][a-z]*)+|(?:[A-Z][a-z]+){2,}|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+"
    r"|[A-Za-z][a-z]{0,11}\d{0,2}(?:[-_.][A-Za-z][a-z]{0,11}\d{0,2})+"
    r"|[A-Za-z_]+(?:\.[A-Za-z_]+)+|_*[a-z]+(?:_[a-z]+)+"
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


_SELF_NAMING = ("pass", "secret", "token", "key")


def _value_is_secret(value: str, word: str, literal: bool, sep: str) -> bool:
    """Whether the value of a secret-named key is a secret itself, not a name or a reference.

    `literal` values (quoted, `ENV=value`, `--flag=value`, `?query=value`) are taken as written;
    others (code, YAML, prose: `token = get_token`, `password: str`) must look random.
    """
    if len(value) < 4 or is_placeholder(value) or _NAMING.fullmatch(value):
        return False
    if char_classes(value) <= 2 and any(w in value.lower() for w in _SELF_NAMING):
        return False  # a value that names itself (`mypassword`, `secret1`): a stand-in
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


class _KeyValue(NamedTuple):
    name: str
    word: str  # the secret word ending the name, with what follows it up to the value
    start: int
    end: int
    literal: bool
    sep: str


def _key_value(text: str, anchor: Anchor) -> _KeyValue | None:
    """The key/value form around a secret word, if the word ends a key name."""
    m = _KV_TAIL.match(text, anchor.start())
    if m is None:
        return None
    word_start = m.start()
    if anchor.group().lower() == "key":  # only `api_key`, `ACCESS_KEY`, `clientKey`, ...
        prefix = _KEY_PREFIX.search(text, max(0, word_start - 14), word_start)
        if prefix is None:
            return None
        word_start = prefix.start()
    name_start = _name_start(text, word_start)
    if name_start is None or in_path(text, name_start):
        return None  # no key here, or a path such as /proc/sys/.../stable_secret
    name = text[name_start : m.start(1) if m.group(1) else m.start(2)].rstrip("]\"' \t")
    key_quote, sep, quote = m.group(1), m.group(2), m.group(3)
    if sep == ":" and not key_quote and not quote and not text[m.end(2) : m.end()]:
        return None  # YAML wants a space after the colon; `user:pass` is not a key
    if sep == ":" and name in ("PASS", "Pass"):
        return None  # a test runner's verdict (`PASS: test_x`), not a key
    found = _kv_value(text, m.end(), quote)
    if (
        found is None
        or name.lstrip("-") in _NOT_SECRET_NAMES
        or _NOT_SECRET_TOKENS.search(name)
        or text[name_start - 2 : name_start] == "::"  # a type path: AWS::IAM::AccessKey
    ):
        return None
    start, end = found
    literal = (
        bool(quote)
        or name.startswith("-")
        or text[name_start - 1 : name_start] in ("?", "&", ";")  # query, connection string
        or (sep == "=" and name == name.upper())
    )
    if not literal:
        end = start + len(text[start:end].rstrip(".:,"))
    return _KeyValue(name, text[word_start : m.end()].lower(), start, end, literal, sep)


# A provider named in the key (`DISCORD_BOT_TOKEN`, `TWILIO_AUTH_TOKEN`) types the value,
# as gitleaks' keyword rules do; a value of a provider's own shape types it by itself.
NAMED_KINDS = (
    ("DISCORD", "discord_token"), ("TELEGRAM", "telegram_token"), ("TWILIO", "twilio_key"),
    ("SENDGRID", "sendgrid_key"), ("MAILGUN", "mailgun_key"), ("SHOPIFY", "shopify_token"),
    ("HEROKU", "heroku_key"), ("DATABRICKS", "databricks_token"),
    ("DIGITALOCEAN", "digitalocean_token"), ("LINEAR", "linear_key"),
    ("DOPPLER", "doppler_token"), ("NPM", "npm_token"), ("PYPI", "pypi_token"),
    ("AZURE", "azure_key"), ("DATADOG", "datadog_key"), ("DD_API_KEY", "datadog_key"),
    ("DD_APP_KEY", "datadog_key"),
    ("CLOUDFLARE", "cloudflare_token"), ("CF_API_TOKEN", "cloudflare_token"),
    ("NEW_RELIC", "newrelic_key"), ("NEWRELIC", "newrelic_key"), ("SENTRY", "sentry_token"),
    ("NOTION", "notion_token"), ("SUPABASE", "supabase_token"), ("POSTMAN", "postman_key"),
    ("MAILCHIMP", "mailchimp_key"), ("VAULT_TOKEN", "vault_token"), ("GROQ", "groq_key"),
    ("REPLICATE", "replicate_token"), ("RUBYGEMS", "rubygems_token"), ("NUGET", "nuget_key"),
    ("CARGO_REGISTRY_TOKEN", "crates_token"),
)  # fmt: skip
VALUE_KINDS = (
    (re.compile(r"dapi[0-9a-f]{32}(?:-\d)?"), "databricks_token"),
    (re.compile(r"[\w~.]{3}\dQ~[\w~.\-]{31,34}"), "azure_key"),
    (re.compile(r"SK[0-9a-fA-F]{32}"), "twilio_key"),
    (re.compile(r"oy2[a-z0-9]{43}"), "nuget_key"),
    (re.compile(r"cio[A-Za-z0-9]{32}"), "crates_token"),
    (re.compile(r"ATATT3[A-Za-z0-9_\-=]{186}"), "atlassian_token"),
    (re.compile(r"EAAA[A-Za-z0-9_\-]{22,60}"), "square_token"),
    (re.compile(r"\d{5,16}:A[\w\-]{34}"), "telegram_token"),
    (re.compile(r"(?:IQoJb3JpZ2luX2Vj|FwoGZXIvYXdzE)[A-Za-z0-9/+=]{40,}"), "aws_session_token"),
)
_HASHED = ("pbkdf2_", "argon2", "bcrypt", "scrypt", "sha1$", "sha256$", "md5$", "crypt$")


def _shape_kind(value: str) -> str | None:
    for pattern, kind in VALUE_KINDS:
        if pattern.fullmatch(value):
            return kind
    return None


def _kv_kind(kv: _KeyValue, value: str) -> str:
    upper = kv.name.upper()
    if "SESSION" in upper and "TOKEN" in upper and ("AWS" in upper or upper == "SESSIONTOKEN"):
        return "aws_session_token"
    if "SECRET" in upper and ("ACCESS" in upper or "AWS" in upper) and len(value) == 40:
        return "aws_secret"
    for word, kind in NAMED_KINDS:
        if word in upper:
            return kind
    return "password" if kv.word.startswith(("pass", "pwd")) else "secret"


# `aws configure set aws_session_token <value>`: a name and a value with no `=` between.
_AWS_SET = re.compile(
    r"aws configure set (?:aws_session_token|aws_secret_access_key)[ \t]+([A-Za-z0-9/+=]{40,})"
)


# `kubectl create secret … --from-literal=name=value`: every value is a secret by definition.
_FROM_LITERAL = re.compile(r"--from-literal[= ]([\w.\-]+)=(['\"]?)([^\s'\"]{8,16384})\2")


def _kubectl_secret(text: str, at: int) -> Span | None:
    line_end = text.find("\n", at, at + 4096)
    m = _FROM_LITERAL.search(text, at, line_end if line_end >= 0 else at + 4096)
    if m is None or is_placeholder(m.group(3)) or char_classes(m.group(3)) < 2:
        return None
    kind = "password" if "pass" in m.group(1).lower() else "secret"
    return Span(m.start(3), m.end(3), kind)


def _positional(text: str, anchor: Anchor) -> Span | None:
    """Secrets given as command arguments: `sshpass -p …`, `aws configure set … <value>`."""
    at = anchor.start()
    if anchor.group() == "pass" and before(text, at, 3) == "ssh":
        return sshpass_password(text, at - 3)
    if anchor.group() == "secret" and before(text, at, 7) == "create ":
        return _kubectl_secret(text, at)
    set_at = text.rfind("aws configure set ", max(0, at - 40), at)
    if set_at >= 0:
        m = _AWS_SET.match(text, set_at)
        if m and not is_placeholder(m.group(1)):
            kind = "aws_session_token" if anchor.group() == "token" else "aws_secret"
            return Span(m.start(1), m.end(1), kind)
    return None


# `.netrc`: `machine <host> login <user> password <password>`, on one line or several.
_NETRC_PASSWORD = re.compile(r"password[ \t]+([^\s\\\"']{1,1024})")
_NETRC_MACHINE = re.compile(r"(?:^|[\s\"'])(?:machine[ \t]+\S+|default)\s", re.M)


def _netrc_password(text: str, at: int) -> Span | None:
    if not (at == 0 or text[at - 1] in " \t\n" or before(text, at, 2) in ("\\n", "\\t")):
        return None
    low = max(0, at - 400)
    if text.find("login", low, at) < 0 or _NETRC_MACHINE.search(text, low, at) is None:
        return None
    m = _NETRC_PASSWORD.match(text, at)
    if m is None or is_placeholder(m.group(1)) or len(m.group(1)) < 4:
        return None
    return Span(m.start(1), m.end(1), "password")


# Terraform: `variable "db_password" { ... default = "..." }`, a default under a secret name.
_TF_VARIABLE = re.compile(
    r'variable[ \t]+"([A-Za-z0-9_\-]{1,128})"[ \t]*\{[^{}]{0,1024}?(?<![\w\-])default[ \t]*='
    r'[ \t]*"([^"\n\\]{1,4096})"'
)


def _terraform_default(text: str, at: int) -> Span | None:
    start = text.rfind("variable", max(0, at - 140), at)
    m = _TF_VARIABLE.match(text, start) if start >= 0 else None
    if m is None or not m.start(1) <= at < m.end(1):
        return None
    word = _SECRET_NAME.search(m.group(1))
    value = m.group(2)
    if word is None or _NOT_SECRET_TOKENS.search(m.group(1)):
        return None
    secret_word = word.group(1).lower()
    if not _value_is_secret(value, secret_word, True, "=") or fixture(text, m.start(2), value):
        return None
    kind = "password" if secret_word.startswith(("pass", "pwd")) else "secret"
    return Span(m.start(2), m.end(2), kind)


# Rails' `config/master.key` holds 32 hex and nothing else: the value printed right after
# `cat config/master.key`, or written to it on the same line (`echo <hex> > config/master.key`).
_MASTER_KEY_AFTER = re.compile(
    r"(?![\w.\-])[^\n\\]{0,200}(?:\r?\n|\\r?\\n)[ \t]*([0-9a-f]{32})(?![0-9A-Za-z])"
)
_HEX32 = re.compile(r"(?<![0-9A-Za-z])([0-9a-f]{32})(?![0-9A-Za-z])")


def _rails_master_key(text: str, at: int) -> Span | None:
    line_start = max(text.rfind("\n", max(0, at - 300), at) + 1, at - 300)
    found = _HEX32.search(text, line_start, at) or _MASTER_KEY_AFTER.match(text, at + 3)
    if found is None:
        return None
    value = found.group(1)
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return None
    return Span(found.start(1), found.end(1), "secret")


# A NuGet API key given as an argument: `--api-key oy2…`, `-ApiKey oy2…`, `setapikey oy2…`.
_NUGET_KEY = re.compile(r"[ \t]+(oy2[a-z0-9]{43})(?![A-Za-z0-9_\-])")


# What `find_key_values` needs somewhere in a text to find anything (a prefilter, see
# `_prefilter`): a secret word, maybe a key prefix, then the separator of `_KV_TAIL`; or the
# words of a positional form, a bare token, a NuGet key, a Rails master key, a `.netrc`
# `password `, a Terraform block.
_KV_SEPARATOR = r"\d*(?:\\?[\"'])?\]?[ \t]*[:=]"
KV_PREFILTER = "|".join(
    (
        r"(?i:passphrase|password|passwd|pass|pwd|secret[_\-]?key|secret|token|credentials?"
        r"|creds)" + _KV_SEPARATOR,
        r"(?i:api|access|private|signing|encryption|master|session|license|account|app|client"
        # `_KEY_PREFIX` ends in `$`, which also holds before a newline.
        r"|consumer|auth)[_\-]?\n?(?i:key)" + _KV_SEPARATOR,
        r"sshpass|create secret|aws configure set ",
        r"SK[0-9a-fA-F]{32}|cio[A-Za-z0-9]{32}|oy2[a-z0-9]{43}|master\.[Kk]ey|password ",
        r"(?i:pass|pwd|secret|token)[^\"]{0,64}\" ?\{",
    )
)


def find_key_values(text: str) -> Iterator[Span]:
    done = 0  # the end of the last value read: words inside a value are no keys
    for anchor in kv_anchors(text):
        word, at = anchor.group(), anchor.start()
        if at < done:
            continue
        # Cheap tests first: this loop runs for every secret word in the text.
        if (
            (word == "pass" and text[at - 3 : at] == "ssh")
            or (word == "secret" and text[at - 7 : at] == "create ")
            or (word in ("token", "key") and text[at - 4 : at] in ("ion_", "ess_"))
        ):
            span = _positional(text, anchor)
            if span is not None:
                yield span
                continue
        if len(word) > 8:
            span = _bare_token(text, anchor)
            if span is not None:
                done = span.end
                yield span
            continue
        kv = _key_value(text, anchor)
        if kv is None:
            other = None
            if word[-1] == "y":  # `key`, `Key`
                if text.startswith(" oy2", at + 3):
                    m = _NUGET_KEY.match(text, at + 3)
                    other = Span(m.start(1), m.end(1), "nuget_key") if m else None
                elif at >= 7 and text.startswith("master.", at - 7):
                    other = _rails_master_key(text, at)
            elif word == "pass" and text.startswith("word ", at + 4):
                other = _netrc_password(text, at)
            elif word[0] in "pPsStT":  # `variable "db_password" {`: a Terraform block
                quote = text.find('"', anchor.end(), anchor.end() + 65)
                if quote >= 0 and text.startswith((" {", "{"), quote + 1):
                    other = _terraform_default(text, at)
            if other is not None:
                done = other.end
                yield other
            continue
        done = kv.end
        value = text[kv.start : kv.end]
        if value.lower() == kv.name.lstrip("-").lower():
            continue
        shaped = _shape_kind(value)
        if shaped is not None:  # a provider's format: trusted in any context
            yield Span(kv.start, kv.end, shaped)
            continue
        if (
            not _value_is_secret(value, kv.word, kv.literal, kv.sep)
            or value.lower().startswith(_HASHED)  # a stored hash, not the password
            or fixture(text, kv.start, value)
        ):
            continue
        yield Span(kv.start, kv.end, _kv_kind(kv, value))


# Name and value as sibling fields: Kubernetes `env:` lists, ECS task definitions.
_Q = r"(?:\\?[\"'])?"  # an optional quote, maybe JSON-escaped
_ENV_ENTRY = re.compile(  # led by `m`, rarer than `n`: `re` stops at fewer places
    r"me(?<=name)" + _Q + r"[ \t]*:[ \t]*" + _Q + r"([A-Za-z_][\w.\-]*)" + _Q
    + r"[ \t]*,?[ \t]*(?:\r?\n[ \t]*(?:-[ \t]*)?)?" + _Q + r"value" + _Q
    + r"[ \t]*:[ \t]*(\\?[\"'])?"
)  # fmt: skip
_SECRET_NAME = re.compile(
    r"(?i)(?:^|[_\-.])(passphrase|password|passwd|pass|pwd|secret|token|credentials?|creds"
    r"|(?:api|access|private|secret|signing|encryption|master|session|client|auth)[_\-]?key)\d*$"
)


# `_ENV_ENTRY` as a prefilter (see `_prefilter`), led by its whole word.
ENV_PREFILTER = "name" + relaxed(_ENV_ENTRY.pattern.removeprefix("me(?<=name)"))


def find_env_entries(text: str) -> Iterator[Span]:
    for m in _ENV_ENTRY.finditer(text):
        name, quote = m.group(1), m.group(2)
        word = _SECRET_NAME.search(name)
        found = _kv_value(text, m.end(), quote) if word else None
        if word is None or found is None or _NOT_SECRET_TOKENS.search(name):
            continue
        value = text[found[0] : found[1]]
        if (
            value.lower() != name.lower()
            and _value_is_secret(value, word.group(1).lower(), True, "=")
            and not fixture(text, found[0], value)
        ):
            kind = "password" if word.group(1).lower().startswith(("pass", "pwd")) else "secret"
            yield Span(found[0], found[1], kind)
