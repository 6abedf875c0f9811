"""Provider credential formats: a known prefix, a length and a charset (`ghp_…`, `sk-…`, `SG.…`).

Many rules are ported from gitleaks' `config/gitleaks.toml` (MIT licence; notice in
`LICENSE-gitleaks` beside this file): AWS, GitHub, GitLab, Slack, Stripe, npm, PyPI,
SendGrid, Shopify, Linear, DigitalOcean, Doppler, Heroku, Discord, Telegram, age, Mailgun,
Azure AD client secrets, Postman, New Relic, Square, Sentry, Grafana, Notion, Terraform
Cloud, RubyGems, Vault (widened to the shorter tokens of dev servers), Mailchimp (trusted without
its keyword). xAI, Groq, Replicate, Supabase, Docker Hub, NuGet, crates.io and Google OAuth
access tokens follow the providers' published formats. Provider formats are trusted in any
context.

Cost: a scan of a long text is the price of each pattern, so rules are found by a few
scans for a separator character (`-`, `_`, `.`) whose lookbehinds name the known prefixes;
the full pattern runs only at those hits. The `-` scan is shared with command-line forms
(`_commands`), the `:` and `=` forms named by a header or parameter live in `_forms`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterator
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
from trajlake.redact._gate import gate
from trajlake.redact._prefilter import relaxed, unled


def _random_body(token: str) -> bool:
    """For short tokens with separators (`glpat-Dqw6-ljZXp8vMPPFwQJc`): the body is random."""
    body = token.split("-", 1)[-1].replace("-", "").replace("_", "").split(".", 1)[0]
    return len(body) >= 16 and char_classes(body) >= 2


def _many_digits(token: str) -> bool:
    return sum(c.isdigit() for c in token) >= 6


def hex_mix(token: str) -> bool:
    """A hex body mixing digits and letters, as random hex does (not `aaaa…`, not a number)."""
    body = token.rsplit("_", 1)[-1].rsplit("-", 1)[-1]
    return any(c.isdigit() for c in body) and any(c.isalpha() for c in body)


def _jwt_header(token: str) -> bool:
    """The first part decodes to a JSON object with `alg`: a JWT, not any dotted base64."""
    header = token.split(".", 1)[0]
    try:
        data = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    except (ValueError, binascii.Error):
        return False
    return isinstance(data, dict) and "alg" in data


class Rule(NamedTuple):
    """A provider format: `pattern` matched where its `prefix` ends at a scanned separator."""

    prefix: str
    kind: str
    pattern: re.Pattern[str]
    check: Callable[[str], bool] | None


_END = r"(?![A-Za-z0-9_\-])"


def _rule(prefix: str, kind: str, pattern: str, check: Callable[[str], bool] | None) -> Rule:
    return Rule(prefix, kind, re.compile(pattern), check)


DASH_RULES = (
    _rule("sk-", "openai_key", r"sk-(?:ant-)?[A-Za-z0-9_\-]{20,}", random_run),
    *(
        _rule(p, "gitlab_token", r"gl[a-z]{2,6}-[A-Za-z0-9_\-]{20,}(?:\.[A-Za-z0-9]{2,}){0,2}",
              _random_body)
        for p in ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "glft-", "glsoat-", "gloas-")
    ),
    *(
        _rule(p, "slack_token", r"x(?:ox[abposre]-|app-\d-)[A-Za-z0-9\-]{10,}", _many_digits)
        for p in ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-", "xoxe-", "xapp-")
    ),
    _rule("HRKU-", "heroku_key", r"HRKU-AA[0-9A-Za-z_\-]{58}" + _END, None),
    _rule("pypi-", "pypi_token", r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,1000}", None),
    _rule("AGE-SECRET-KEY-", "age_key", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
          None),
    _rule("key-", "mailgun_key", r"key-[0-9a-f]{32}(?![A-Za-z0-9])", hex_mix),
    _rule("xai-", "xai_key", r"xai-[0-9A-Za-z_]{80}" + _END, random_run),
    _rule("PMAK-", "postman_key", r"PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}" + _END, hex_mix),
    _rule("NRAK-", "newrelic_key", r"NRAK-[A-Za-z0-9]{27}" + _END, hex_mix),
    *(
        _rule(p, "square_token", r"sq0(?:atp-[\w\-]{22}|csp-[\w\-]{43})" + _END, random_run)
        for p in ("sq0atp-", "sq0csp-")
    ),
)  # fmt: skip
_UNDERSCORE_RULES = (
    *(
        _rule(p, "github_token", r"g(?:h[pousr]_[A-Za-z0-9]{36,251}|ithub_pat_\w{22,255})" + _END,
              random_run)
        for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")
    ),
    _rule("hf_", "hf_token", r"hf_[A-Za-z0-9]{30,40}" + _END, mixed_case),
    # Publishable keys (pk_live_/pk_test_) ship in web pages by design: not secrets.
    *(
        _rule(p, "stripe_key", r"[sr]k_(?:live|test)_[0-9A-Za-z]{10,247}", random_run)
        for p in ("sk_live_", "sk_test_", "rk_live_", "rk_test_")
    ),
    _rule("whsec_", "stripe_key", r"whsec_[A-Za-z0-9+/]{20,}", random_run),
    _rule("npm_", "npm_token", r"npm_[A-Za-z0-9]{36}" + _END, random_run),
    *(
        _rule(p, "shopify_token", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + _END, hex_mix)
        for p in ("shpat_", "shpca_", "shppa_", "shpss_")
    ),
    _rule("lin_api_", "linear_key", r"lin_api_[A-Za-z0-9]{40}" + _END, random_run),
    *(
        _rule(p, "digitalocean_token", r"do[opr]_v1_[a-f0-9]{64}" + _END, hex_mix)
        for p in ("dop_v1_", "doo_v1_", "dor_v1_")
    ),
    _rule("gsk_", "groq_key", r"gsk_[A-Za-z0-9]{52}" + _END, random_run),
    _rule("r8_", "replicate_token", r"r8_[A-Za-z0-9]{37}" + _END, random_run),
    _rule("ntn_", "notion_token", r"ntn_[0-9]{11}[A-Za-z0-9]{35}" + _END, random_run),
    _rule("secret_", "notion_token", r"secret_[A-Za-z0-9]{43}" + _END, random_run),
    *(
        _rule(p, "sentry_token",
              r"sntry(?:s_eyJ[A-Za-z0-9+/=_]{40,}|u_[a-f0-9]{64})(?![A-Za-z0-9+/=_\-])",
              random_run)
        for p in ("sntrys_", "sntryu_")
    ),
    _rule("glsa_", "grafana_token", r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}" + _END, random_run),
    _rule("glc_", "grafana_token", r"glc_[A-Za-z0-9+/]{32,400}={0,3}(?![A-Za-z0-9+/=_\-])",
          random_run),
    _rule("sbp_", "supabase_token", r"sbp_[a-f0-9]{40}" + _END, hex_mix),
    _rule("rubygems_", "rubygems_token", r"rubygems_[a-f0-9]{48}" + _END, hex_mix),
    *(
        _rule(p, "docker_pat", r"dckr_(?:pat|oat)_[A-Za-z0-9_\-]{27}" + _END, random_run)
        for p in ("dckr_pat_", "dckr_oat_")
    ),
)  # fmt: skip
_DOT_RULES = (
    _rule("SG.", "sendgrid_key", r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}" + _END, None),
    _rule("dp.", "doppler_token",
          r"dp\.(?:pt|st|sa|ct|scim|audit)\.(?:[a-z0-9_\-]{1,30}\.)?[A-Za-z0-9]{40,44}" + _END,
          random_run),
    _rule("ya29.", "gcp_access_token", r"ya29\.[A-Za-z0-9_\-]{30,2048}" + _END, random_run),
    *(
        _rule(p, "vault_token", r"hv[sbr]\.[A-Za-z0-9_\-]{24,300}" + _END, random_run)
        for p in ("hvs.", "hvb.", "hvr.")
    ),
)  # fmt: skip


def scanner(
    separator: str, rules: tuple[Rule, ...], lookahead: str, extra: str = ""
) -> re.Pattern[str]:
    """One scan for `separator` that stops only where a rule's prefix ends (or `extra` holds)."""
    tails = {r.prefix[: r.prefix.rindex(separator) + 1] for r in rules}
    # One lookbehind per length (an alternation of equal widths): fewer steps back per hit.
    widths = sorted({len(t) for t in tails}, reverse=True)
    alts = "|".join(
        "(?<=" + "|".join(re.escape(t) for t in sorted(tails) if len(t) == n) + ")" for n in widths
    )
    return re.compile(re.escape(separator) + f"(?:{extra}{lookahead}(?:{alts}))")


# What a match of each finder needs (`_gate`): a rule's prefix, or the words of a form.
PROVIDER_GATE = gate(
    *(rule.prefix for rule in _UNDERSCORE_RULES + _DOT_RULES), "eyJ.", ".atlasv1.", "M.", "N.",
    "O.",
)  # fmt: skip
WEBHOOK_GATE = gate("hooks.slack.com/", "api/webhooks/discord")

# A Sentry org token's body is base64 (`+`, `/`): its `_` is found by the `eyJ` after it.
_UNDERSCORE_SCAN = scanner("_", _UNDERSCORE_RULES, r"(?=[A-Za-z0-9]{16})", r"(?=eyJ)(?<=sntrys_)|")
# `SG.`/`dp.`/`hvs.`/`ya29.` prefixes, a Discord bot token's first dot, a JWT's payload
# (`.eyJ…`), a Terraform Cloud token's `.atlasv1.`.
_DOT_SCAN = re.compile(
    r"\.(?:(?=eyJ)(?<=[\w\-]{8}\.)|(?=[\w\-]{6}\.)(?<=[A-Za-z0-9]{24}\.)"
    r"|(?<=[Gp9sbr]\.)(?:(?<=SG\.|dp\.)|(?<=hv[sbr]\.)|(?<=ya29\.))"
    r"|(?=atlasv1\.)(?<=[A-Za-z0-9]{14}\.))"
)
# A Terraform Cloud / Enterprise API token: 14 chars, `.atlasv1.`, 60 to 70 more.
_TERRAFORM_TOKEN = re.compile(r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,70}" + _END)
_JWT = re.compile(r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{8,}" + _END)
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _jwt(text: str, dot: int) -> Span | None:
    """The JWT whose header ends at `dot` (its payload starts `eyJ`, as JSON in base64 does)."""
    start = dot
    while start > dot - 2048 and start and text[start - 1] in _TOKEN_CHARS:
        start -= 1
    if not text.startswith("eyJ", start) or not at_boundary(text, start):
        return None
    m = _JWT.match(text, start)
    if m is None or not _jwt_header(m.group()) or is_placeholder(m.group()):
        return None
    return Span(start, m.end(), "jwt")


_DISCORD_TOKEN = re.compile(r"[MNO][A-Za-z0-9]{23,27}\.[\w\-]{6}\.[\w\-]{27,38}" + _END)


def match_rules(text: str, sep_end: int, rules: tuple[Rule, ...]) -> Span | None:
    for rule in rules:
        start = sep_end - len(rule.prefix)
        if start < 0 or not text.startswith(rule.prefix, start):
            continue
        m = rule.pattern.match(text, start)
        if m is None or not at_boundary(text, start):
            continue
        value = m.group()
        if (rule.check is None or rule.check(value)) and not is_placeholder(value):
            kind = "anthropic_key" if value.startswith("sk-ant-") else rule.kind
            return Span(start, m.end(), kind)
    return None


def _scan(text: str, scan: re.Pattern[str], rules: tuple[Rule, ...]) -> Iterator[Span]:
    done = 0
    for hit in scan.finditer(text):
        if hit.start() < done:
            continue  # inside a token found already
        span = match_rules(text, hit.end(), rules)
        if span is not None:
            done = span.end
            yield span


def _discord(text: str, dot: int) -> Span | None:
    for length in range(24, 29):
        start = dot - length
        if start < 0 or text[start] not in "MNO" or not at_boundary(text, start):
            continue
        m = _DISCORD_TOKEN.match(text, start)
        if m and mixed_case(m.group()) and not is_placeholder(m.group()):
            return Span(start, m.end(), "discord_token")
    return None


def _terraform_token(text: str, start: int) -> Span | None:
    m = _TERRAFORM_TOKEN.match(text, start)
    if m is None or not at_boundary(text, start) or not random_run(m.group()):
        return None
    return Span(start, m.end(), "terraform_token")


def find_provider_tokens(text: str) -> Iterator[Span]:
    """Tokens with a `_` or `.` prefix (`ghp_…`, `npm_…`, `SG.…`), Discord bot tokens, JWTs."""
    yield from _scan(text, _UNDERSCORE_SCAN, _UNDERSCORE_RULES)
    done = 0
    for hit in _DOT_SCAN.finditer(text):
        if hit.start() < done:
            continue
        if text.startswith("eyJ", hit.end()):
            span = _jwt(text, hit.start())
        elif text.startswith("atlasv1.", hit.end()):
            span = _terraform_token(text, hit.start() - 14)
        else:
            span = match_rules(text, hit.end(), _DOT_RULES) or _discord(text, hit.start())
        if span is not None:
            done = span.end
            yield span


_GOOGLE_KEY = re.compile(r"AIza[0-9A-Za-z_\-]{35}" + _END)  # a literal of its own: fast


# What `find_provider_tokens` needs somewhere in a text to find anything (a prefilter, see
# `_prefilter`): the part after its leading classes of a rule's pattern, a JWT, a Discord or
# a Terraform token.
PROVIDER_PREFILTER = "|".join(
    dict.fromkeys(
        unled(relaxed(p.pattern))
        for p in (*(r.pattern for r in _UNDERSCORE_RULES + _DOT_RULES), _JWT, _DISCORD_TOKEN,
                  _TERRAFORM_TOKEN)
    )
)  # fmt: skip


def find_google_keys(text: str) -> Iterator[Span]:
    """Google API keys (`AIza…`)."""
    for m in _GOOGLE_KEY.finditer(text):
        if at_boundary(text, m.start()) and not is_placeholder(m.group()):
            yield Span(m.start(), m.end(), "google_api_key")


# Led by its rarest letter (`re` stops at fewer places); a hit starts 3 characters earlier.
_HOOKS = re.compile(r"k(?<=hook)(?=s[./])")
_SLACK_HOOK_PATTERN = r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/\-]{20,})"
_SLACK_HOOK = re.compile(_SLACK_HOOK_PATTERN)
_DISCORD_HOOK_TAIL = r"(\d{17,20}/[A-Za-z0-9_\-]{60,70})"
_DISCORD_HOOK = re.compile(r"hooks/" + _DISCORD_HOOK_TAIL + _END)
# What `find_webhooks` needs (a prefilter, see `_prefilter`).
WEBHOOK_PREFILTER = relaxed(_SLACK_HOOK_PATTERN) + "|api/webhooks/" + relaxed(_DISCORD_HOOK_TAIL)


def find_webhooks(text: str) -> Iterator[Span]:
    """The secret path of Slack and Discord webhook URLs (the host stays)."""
    for hit in _HOOKS.finditer(text):
        at = hit.start() - 3  # where `hooks` starts
        m = _SLACK_HOOK.match(text, at)
        kind = "slack_webhook"
        if m is None and before(text, at, 7) == "api/web":
            m = _DISCORD_HOOK.match(text, at)
            kind = "discord_webhook"
            if m and "discord" not in before(text, at, 30):
                m = None
        if m and char_classes(m.group(1)) >= 2 and not is_placeholder(m.group(1)):
            yield Span(m.start(1), m.end(1), kind)
