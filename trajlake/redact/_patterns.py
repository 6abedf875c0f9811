"""Secret detectors behind redaction: what is found, of which kind and family, and how fast.

`find_secrets(text)` returns the spans of the secrets in a text, non-overlapping and in order.
A span covers the secret only (the password of a URL, the value of `API_KEY=...`), so the text
around it keeps its shape. Provider formats live in `_providers`, command lines in `_commands`,
header and parameter forms in `_forms`, personal data in `_personal`, context rules in
`_context`; this module holds the generic forms
(key/value, URL passwords, auth headers, AWS pairs, private keys) and puts them together.
Speed comes from `re` itself: every scan starts with a literal (a word or a separator with
lookbehinds), and short texts pass one combined gate (`GATE`, built from `TRIGGERS`) first.
Long texts skip each detector whose character gate (`_gate`) they fail: the cost of
redaction is the number of scans, and a test for one absent character is nearly free.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import NamedTuple

from trajlake.redact._base import (
    PLACEHOLDER_RE,
    Intervals,
    Span,
    at_boundary,
    char_classes,
    is_placeholder,
    mixed_case,
    random_run,
    unescaped_backslash,
)
from trajlake.redact._commands import DASH_GATE, DASH_PREFILTER, find_dash_forms
from trajlake.redact._context import in_code, weak
from trajlake.redact._forms import (
    COLON_PREFILTER,
    EQUALS_GATE,
    EQUALS_PREFILTER,
    find_colon_forms,
    find_equals_forms,
)
from trajlake.redact._gate import Gate, admits, gate
from trajlake.redact._keyvalue import (
    ENV_PREFILTER,
    KV_PREFILTER,
    NAMED_KINDS,
    VALUE_KINDS,
    find_env_entries,
    find_key_values,
)
from trajlake.redact._personal import find_emails, find_phones
from trajlake.redact._prefilter import relaxed, ruled_out
from trajlake.redact._providers import (
    PROVIDER_GATE,
    PROVIDER_PREFILTER,
    WEBHOOK_GATE,
    WEBHOOK_PREFILTER,
    find_google_keys,
    find_provider_tokens,
    find_webhooks,
)

__all__ = [
    "FAMILY",
    "GATE",
    "KINDS",
    "PLACEHOLDER_RE",
    "TRIGGERS",
    "Intervals",
    "Span",
    "char_classes",
    "find_secrets",
    "is_placeholder",
    "may_hold_secrets",
    "rule_out",
]


# AWS access key ids are base32 after a fixed prefix; the secret key has no prefix, so it is
# taken only next to an id (credentials CSV, `aws configure` prompts) or after a key name.
# The same `A`-led scan finds Atlassian API tokens (`ATATT3` + 186, as in gitleaks).
_AWS_ID = re.compile(
    r"A(?:(?:KI|SI)A[A-Z0-9]{16}(?![A-Za-z0-9])|TATT3[A-Za-z0-9_\-=]{186}(?![A-Za-z0-9_\-]))"
)
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_AWS_CONTEXT = re.compile(r"(?i)aws|access|key|secret|session|credential")


def _aws_secret_shape(value: str) -> bool:
    return mixed_case(value) and any(c.isdigit() or c in "/+" for c in value)


def _find_aws(text: str) -> Iterator[Span]:
    for m in _AWS_ID.finditer(text):
        key = m.group()
        if key[1] == "T":
            if at_boundary(text, m.start()) and random_run(key) and not is_placeholder(key):
                yield Span(m.start(), m.end(), "atlassian_token")
            continue
        if text[m.start() - 1 : m.start()].isalnum() and not at_boundary(text, m.start()):
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


# The password may hold `#` (a fragment cannot come before the `@` of the host).
_URL_PASSWORD = re.compile(r"://([^\s:/@\"'<>\\?#]*):([^\s/\"'<>\\?]+)@(?=[A-Za-z0-9\[])")
# Hosts of documentation and tests: a weak password there is an example, not a credential.
_DOC_HOST = re.compile(
    r"(?:[\w\-]+\.)*example(?:\.(?:com|org|net))?(?![\w\-.])|localhost(?![\w\-.])"
    r"|127\.0\.0\.1(?![\d.])|host(?![\w\-.])|[\w\-.]+\.(?:test|invalid|local)(?![\w\-.])"
)


def _find_url_passwords(text: str) -> Iterator[Span]:
    for m in _URL_PASSWORD.finditer(text):
        user, password = m.group(1), m.group(2)
        if is_placeholder(password) or password == user:
            continue
        if weak(password) and (_DOC_HOST.match(text, m.end()) or in_code(text, m.start())):
            continue  # `http://user:pass@example.com` in a validator's tests
        yield Span(m.start(2), m.end(2), "url_password")


_AUTH_VALUE = r"[ \t]+([A-Za-z0-9._~+/\-]{16,}={0,2})(?![A-Za-z0-9._~+/=\-])"


def _led(word: str, by: str, rest: str) -> tuple[re.Pattern[str], int]:
    """`word + rest`, led by the letter `by` of the word (`rer(?<=earer)`: `re` stops at
    fewer places than for `earer`); returns it and where the word starts before a hit."""
    lead = word.index(by)
    return re.compile(re.escape(word[lead:]) + f"(?<={re.escape(word)})" + rest), lead


# (pattern, where its word starts before a hit, letters the word must follow, gate)
_AUTH = (
    (*_led("earer", "r", _AUTH_VALUE), "Bb", gate("bearer", "Bearer")),
    (re.compile(r"EARER" + _AUTH_VALUE), 0, "B", gate("BEARER")),
    (
        *_led(
            "uthorization",
            "z",
            r"[\"']?\]?[ \t]*[:=][ \t]*[\"']?(?:[Bb]asic|BASIC|[Tt]oken|TOKEN)" + _AUTH_VALUE,
        ),
        "Aa",
        gate("uthorization"),
    ),
)


# What `_find_auth_headers` needs (a prefilter, see `_prefilter`): each pattern's whole word.
_AUTH_PREFILTER = "|".join(
    (
        "earer" + relaxed(_AUTH_VALUE),
        "EARER" + relaxed(_AUTH_VALUE),
        "uthorization" + relaxed(_AUTH[2][0].pattern.partition("(?<=uthorization)")[2]),
    )
)


def _find_auth_headers(text: str) -> Iterator[Span]:
    for pattern, lead, initial, chars in _AUTH:
        if not admits(text, chars):
            continue
        for m in pattern.finditer(text):
            value = m.group(1)
            word = m.start() - lead
            if (
                text[word - 1 : word] in tuple(initial)
                and at_boundary(text, word - 1)
                and char_classes(value) >= 2
                and not is_placeholder(value)
            ):
                yield Span(m.start(1), m.end(1), "auth_header")


def _holds_key_value(decoded: str) -> bool:
    return any(True for _ in find_key_values(decoded))


def _find_dash_forms(text: str) -> Iterator[Span]:
    return find_dash_forms(text, _holds_key_value)


FAMILY: dict[str, str] = {
    "aws_key": "cloud", "aws_secret": "cloud", "aws_session_token": "cloud",
    "gcp_key_id": "cloud", "gcp_access_token": "cloud", "google_api_key": "cloud",
    "azure_key": "cloud", "digitalocean_token": "cloud", "databricks_token": "cloud",
    "heroku_key": "cloud",
    "github_token": "vcs", "gitlab_token": "vcs",
    "openai_key": "ai_provider", "anthropic_key": "ai_provider", "hf_token": "ai_provider",
    "groq_key": "ai_provider", "replicate_token": "ai_provider", "xai_key": "ai_provider",
    "slack_token": "saas", "slack_webhook": "saas", "stripe_key": "saas",
    "sendgrid_key": "saas", "twilio_key": "saas", "mailgun_key": "saas",
    "shopify_token": "saas", "discord_token": "saas", "discord_webhook": "saas",
    "telegram_token": "saas", "linear_key": "saas", "doppler_token": "saas",
    "datadog_key": "saas", "newrelic_key": "saas", "sentry_token": "saas",
    "grafana_token": "saas", "notion_token": "saas", "atlassian_token": "saas",
    "square_token": "saas", "mailchimp_key": "saas", "postman_key": "saas",
    "cloudflare_token": "saas", "supabase_token": "saas", "vault_token": "saas",
    "terraform_token": "saas",
    "npm_token": "registry", "pypi_token": "registry", "docker_auth": "registry",
    "docker_pat": "registry", "rubygems_token": "registry", "nuget_key": "registry",
    "crates_token": "registry",
    "private_key": "private_key", "age_key": "private_key",
    "jwt": "token", "auth_header": "token", "session_cookie": "token",
    "url_signature": "token",
    "url_password": "password", "password": "password",
    "secret": "generic_secret",
    "email": "personal", "phone": "personal",
}  # fmt: skip
"""Secret kind → family: cloud, vcs, ai_provider, saas, registry, private_key, token,
password, generic_secret, or personal (personal data rather than a credential)."""

KINDS: tuple[str, ...] = tuple(FAMILY)
"""Every placeholder kind, in documentation order."""


class _Finder(NamedTuple):
    priority: int  # on overlap the lower number wins: `OPENAI_API_KEY=sk-…` is an openai_key
    needs: Gate | None  # run only if the text passes this gate (`_gate`); None: always
    find: Callable[[str], Iterator[Span]]
    kinds: frozenset[str]
    prefilter: str | None = None  # RE2: matches every text `find` finds anything in


def _finder(
    priority: int,
    needs: Gate | None,
    find: Callable[[str], Iterator[Span]],
    *kinds: str,
    prefilter: str | None = None,
) -> _Finder:
    # Hand-written prefilters are relaxed too: their counted repetitions become cheap ones.
    relaxed_prefilter = None if prefilter is None else relaxed(prefilter)
    return _Finder(priority, needs, find, frozenset(kinds), relaxed_prefilter)


_PROVIDER_KINDS = (
    "openai_key", "anthropic_key", "github_token", "gitlab_token", "slack_token", "hf_token",
    "stripe_key", "npm_token", "pypi_token", "sendgrid_key", "shopify_token", "linear_key",
    "digitalocean_token", "doppler_token", "heroku_key", "age_key", "mailgun_key",
    "discord_token", "jwt", "xai_key", "postman_key", "newrelic_key", "square_token",
    "groq_key", "replicate_token", "notion_token", "sentry_token", "grafana_token",
    "supabase_token", "rubygems_token", "docker_pat", "gcp_access_token", "vault_token",
    "terraform_token",
)  # fmt: skip
_NAMED = tuple(kind for _, kind in NAMED_KINDS) + tuple(kind for _, kind in VALUE_KINDS)
_FINDERS = (
    _finder(0, gate("-----BEGIN PRIVATE KEY"), _find_private_keys, "private_key"),
    _finder(0, DASH_GATE, _find_dash_forms, *_PROVIDER_KINDS, "mailchimp_key", "private_key",
            "password", "secret", prefilter=DASH_PREFILTER),
    _finder(0, PROVIDER_GATE, find_provider_tokens, *_PROVIDER_KINDS,
            prefilter=PROVIDER_PREFILTER),
    _finder(0, gate("AIza"), find_google_keys, "google_api_key"),
    _finder(0, WEBHOOK_GATE, find_webhooks, "slack_webhook", "discord_webhook",
            prefilter=WEBHOOK_PREFILTER),
    _finder(0, gate(":"), find_colon_forms, "telegram_token", "docker_auth", "gcp_key_id",
            "session_cookie", "phone", prefilter=COLON_PREFILTER),
    _finder(1, gate("AKIA", "ASIA", "ATATT3"), _find_aws, "aws_key", "aws_secret",
            "atlassian_token"),
    _finder(1, gate("://@"), _find_url_passwords, "url_password"),
    _finder(1, EQUALS_GATE, find_equals_forms, "url_signature", "session_cookie",
            "aws_session_token", prefilter=EQUALS_PREFILTER),
    _finder(2, gate("bearer", "Bearer", "BEARER", "uthorization"), _find_auth_headers,
            "auth_header", prefilter=_AUTH_PREFILTER),
    _finder(2, None, find_key_values, "password", "secret", "aws_secret", "aws_session_token",
            *_NAMED, prefilter=KV_PREFILTER),
    _finder(2, gate("namevalue"), find_env_entries, "password", "secret",
            prefilter=ENV_PREFILTER),
    _finder(3, gate("@"), find_emails, "email"),
    _finder(3, gate("+"), find_phones, "phone"),
)  # fmt: skip

TRIGGERS: tuple[str, ...] = (
    "PRIVATE KEY", "sk-", "gl", "xox", "xapp-", "HRKU-", "pypi-", "AGE-SECRET-KEY-", "key-",
    "gh", "github_pat_", "hf_", "k_live_", "k_test_", "whsec_", "npm_", "shp", "lin_api_",
    "_v1_", "SG.", "dp.", "AIza", "eyJ", "hooks", "ookie", "OOKIE", ":A", "auth", "key_id",
    "SESS", "essionid", "sig=", "ignature=", "session", ".sid=", "Security-Token", "AKIA",
    "ASIA", "://", "mysql", "ase64", "earer", "EARER", "uthorization", "UTHORIZATION",
    "value", "@", "+", "hone", "HONE", "obile", "OBILE", "Tel", "tel", "TEL", "Cell", "cell",
    "fax", "Fax", "xai-", "PMAK-", "NRAK-", "sq0", "EAAA", "ATATT3", "gsk_", "r8_", "ntn_",
    "sntry", "glsa_", "glc_", "sbp_", "rubygems_", "dckr_", "ya29.", "hvs.", "hvb.", "hvr.",
    "atlasv1.", "-us", "oy2", "PuTTY-User-Key-File-", "redis-cli", "curl", "master.key",
    "key", "token", "secret", "pass", "pwd", "cred", "Key", "Token", "Secret", "Pass", "Cred",
    "KEY", "TOKEN", "SECRET", "PASS", "PWD", "CRED",
)  # fmt: skip
"""Literal keywords of every rule: a text holding none of them (nor the shape of a Discord
bot token, see `GATE`) has no secret. A caller may pre-filter a whole column with `GATE`."""


def _factored(words: tuple[str, ...]) -> str:
    """An alternation of `words` grouped by first letter (`re` scans it about twice as fast).

    A word holding a shorter one is dropped: the shorter one gates the same texts.
    """
    kept = sorted(w for w in set(words) if not any(o != w and o in w for o in words))
    groups: dict[str, list[str]] = {}
    for word in kept:
        groups.setdefault(word[0], []).append(word[1:])
    parts = []
    for first, rests in sorted(groups.items()):
        tails = "|".join(re.escape(r) for r in sorted(rests, key=len, reverse=True))
        parts.append(re.escape(first) + (f"(?:{tails})" if any(rests) else ""))
    return "|".join(parts)


# Shapes with no keyword of their own: a Discord bot token, a Twilio `SK` key sid, a crates.io
# token, a `.pgpass` line (`host:port:db:user:password`).
GATE = re.compile(
    _factored(TRIGGERS)
    + r"|\.[\w\-]{6}\.[\w\-]{27}|SK[0-9a-fA-F]{32}|cio[A-Za-z0-9]{32}|:(?:\d{4,5}|\*):[^\s:]+:"
)
"""One scan for any trigger: `GATE.search(text)` is None only for texts without secrets."""


def may_hold_secrets(text: str) -> bool:
    """Whether `text` holds a trigger of some rule (False: `find_secrets` finds nothing)."""
    return len(text) >= 6 and GATE.search(text) is not None


# Most fields are short (ids, names, one-line values): for them one scan for any trigger is
# cheaper than a call per detector.
_SHORT = 384


_CHOSEN: dict[frozenset[str] | None, tuple[tuple[tuple[int, _Finder], ...], bool]] = {}


def _chosen(kinds: frozenset[str] | None) -> tuple[tuple[tuple[int, _Finder], ...], bool]:
    """The finders of any kind in `kinds` with their ids, and whether some find other kinds too
    (then their spans are filtered). Worked out once per set of kinds: a call per trajectory
    asks again."""
    chosen = _CHOSEN.get(kinds)
    if chosen is None:
        if len(_CHOSEN) > 64:  # callers ask for a few sets of kinds; bound it all the same
            _CHOSEN.clear()
        finders = tuple((i, f) for i, f in enumerate(_FINDERS) if kinds is None or f.kinds & kinds)
        extra = kinds is not None and any(not f.kinds <= kinds for _, f in finders)
        chosen = _CHOSEN[kinds] = (finders, extra)
    return chosen


def rule_out(texts: Sequence[str], *, kinds: Collection[str] | None = None) -> list[frozenset[int]]:
    """For each text, the detectors that cannot find anything in it (their prefilter misses),
    decided for the whole batch by native scans; pass each to `find_secrets(ruled_out=...)`.

    A batch of long texts (a part's joined trajectories) is what it is for: one call costs a
    few Arrow kernel calls, however many texts.
    """
    return ruled_out(texts, _prefilter_groups(None if kinds is None else frozenset(kinds)))


# Detectors whose prefilter often matches in agent text (`key = …`, `-p`) or is long get a
# scan of their own on the texts that may hold a secret; the others share one.
_OWN_SCAN = frozenset({"find_key_values", "_find_dash_forms", "find_provider_tokens"})


@functools.lru_cache(maxsize=16)
def _prefilter_groups(kinds: frozenset[str] | None) -> tuple[tuple[frozenset[int], str], ...]:
    finders, _ = _chosen(kinds)
    own = [(frozenset({i}), f.prefilter) for i, f in finders if f.find.__name__ in _OWN_SCAN]
    shared = [(i, f.prefilter) for i, f in finders if f.find.__name__ not in _OWN_SCAN]
    groups = [(ids, p) for ids, p in own if p is not None]
    shared = [(i, p) for i, p in shared if p is not None]
    if shared:
        ids = frozenset(i for i, _ in shared)
        groups.append((ids, "|".join(f"(?:{p})" for _, p in shared)))
    return tuple(groups)


def _candidates(
    text: str, kinds: frozenset[str] | None, skipped: Collection[int]
) -> list[tuple[int, Span]]:
    found: list[tuple[int, Span]] = []
    finders, extra = _chosen(kinds)
    for i, f in finders:
        if i not in skipped and (f.needs is None or admits(text, f.needs)):
            found.extend((f.priority, span) for span in f.find(text))
    if extra and found:
        assert kinds is not None
        found = [c for c in found if c[1].kind in kinds]
    return found


def find_secrets(
    text: str, *, kinds: Collection[str] | None = None, ruled_out: Collection[int] = ()
) -> list[Span]:
    """The secrets in `text`: non-overlapping spans in order; placeholders are never matched.

    Args:
        text: any text; JSON text (tool-call arguments) stays valid JSON when spans are
            replaced by placeholders.
        kinds: look only for these kinds (see `KINDS`, `FAMILY`); detectors of no kind asked
            for are skipped, so a caller that keeps personal data pays nothing for it.
        ruled_out: detectors `rule_out` found nothing for in this text: not run.
    """
    if len(text) < _SHORT and (len(text) < 6 or not GATE.search(text)):
        return []
    wanted = None if kinds is None else frozenset(kinds)
    candidates = _candidates(text, wanted, ruled_out)
    if not candidates:
        return []
    taken = Intervals((m.start(), m.end()) for m in PLACEHOLDER_RE.finditer(text))
    chosen: list[Span] = []
    for _, span in sorted(candidates, key=lambda c: (c[0], c[1].start, -c[1].end)):
        start, end, kind = span
        # Never split a JSON escape: the text may be JSON (tool-call arguments) and must stay so.
        if start and unescaped_backslash(text, start - 1):
            start += 5 if text[start] == "u" else 1
        while end > start and unescaped_backslash(text, end - 1):
            end -= 1
        if end <= start or taken.overlaps(start, end):
            continue
        taken.add(start, end)
        chosen.append(Span(start, end, kind))
    return sorted(chosen)
