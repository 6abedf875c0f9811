"""Provider credential formats (prefix, length, charset) and command-line and header forms.

Many rules are ported from gitleaks' `config/gitleaks.toml` (MIT licence; notice in
`LICENSE-gitleaks` beside this file): AWS, GitHub, GitLab, Slack, Stripe, npm, PyPI,
SendGrid, Shopify, Linear, DigitalOcean, Doppler, Heroku, Discord, Telegram, age, Mailgun,
Azure AD client secrets, Postman, New Relic, Square, Sentry, Grafana, Notion, Terraform
Cloud, RubyGems, Vault (widened to the shorter tokens of dev servers), Mailchimp (trusted without
its keyword). xAI, Groq, Replicate, Supabase, Docker Hub, NuGet, crates.io and Google OAuth
access tokens follow the providers' published formats. Provider formats are trusted in any
context.

Cost: a scan of a long text is the price of each pattern, so rules are found by a few
scans for a separator character (`-`, `_`, `.`, `:`, `=`) whose lookbehinds name the known
prefixes or key words; the full pattern runs only at those hits.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterator
from typing import NamedTuple

from trajlake.ingest._secret_base import (
    Span,
    at_boundary,
    before,
    char_classes,
    is_placeholder,
    mixed_case,
    random_run,
    strong,
)
from trajlake.ingest._secret_gate import gate
from trajlake.ingest._secret_personal import PHONE_WORD, PHONE_WORD_LOOKBEHINDS, national_phone


def _random_body(token: str) -> bool:
    """For short tokens with separators (`glpat-Dqw6-ljZXp8vMPPFwQJc`): the body is random."""
    body = token.split("-", 1)[-1].replace("-", "").replace("_", "").split(".", 1)[0]
    return len(body) >= 16 and char_classes(body) >= 2


def _many_digits(token: str) -> bool:
    return sum(c.isdigit() for c in token) >= 6


def _hex_mix(token: str) -> bool:
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


_DASH_RULES = (
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
    _rule("key-", "mailgun_key", r"key-[0-9a-f]{32}(?![A-Za-z0-9])", _hex_mix),
    _rule("xai-", "xai_key", r"xai-[0-9A-Za-z_]{80}" + _END, random_run),
    _rule("PMAK-", "postman_key", r"PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}" + _END, _hex_mix),
    _rule("NRAK-", "newrelic_key", r"NRAK-[A-Za-z0-9]{27}" + _END, _hex_mix),
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
        _rule(p, "shopify_token", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + _END, _hex_mix)
        for p in ("shpat_", "shpca_", "shppa_", "shpss_")
    ),
    _rule("lin_api_", "linear_key", r"lin_api_[A-Za-z0-9]{40}" + _END, random_run),
    *(
        _rule(p, "digitalocean_token", r"do[opr]_v1_[a-f0-9]{64}" + _END, _hex_mix)
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
    _rule("sbp_", "supabase_token", r"sbp_[a-f0-9]{40}" + _END, _hex_mix),
    _rule("rubygems_", "rubygems_token", r"rubygems_[a-f0-9]{48}" + _END, _hex_mix),
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


def _scanner(
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


# What a match of each finder needs (`_secret_gate`): a rule's prefix, or the words of a form.
DASH_GATE = gate(
    *(rule.prefix[:2] + "-" for rule in _DASH_RULES), "base64 -", "mysql -p", "redis-cli -a",
    "curl -u", "-us", "-Private-Lines:",
)  # fmt: skip
PROVIDER_GATE = gate(
    *(rule.prefix for rule in _UNDERSCORE_RULES + _DOT_RULES), "eyJ.", ".atlasv1.", "M.", "N.",
    "O.",
)  # fmt: skip
WEBHOOK_GATE = gate("hooks.slack.com/", "api/webhooks/discord")
EQUALS_GATE = gate(
    "sig=", "ignature=", "SESSID=", "SESSIONID=", "essionid=", "session=", ".sid=",
    "Security-Token=",
)  # fmt: skip


# The `-` scan also stops at `base64 -d` (an encoded .env), at a glued `-p<password>`, at
# `-a <password>` and `-u <user:password>` (redis-cli, curl), at a Mailchimp key's `-us`, and
# at the header of a PuTTY private key (`PuTTY-User-Key-File-3:`).
_DASH_SCAN = _scanner(
    "-",
    _DASH_RULES,
    r"(?=[A-Za-z0-9_][\w\-]{9})",
    r"(?<=base64 -)|(?<=[ \t]-)(?=p[^\s\-]|[au][ \t])|(?=us\d)(?<=[0-9a-f]{32}-)"
    r"|(?=[123]: )(?<=PuTTY-User-Key-File-)|",
)
# A Sentry org token's body is base64 (`+`, `/`): its `_` is found by the `eyJ` after it.
_UNDERSCORE_SCAN = _scanner("_", _UNDERSCORE_RULES, r"(?=[A-Za-z0-9]{16})", r"(?=eyJ)(?<=sntrys_)|")
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


def _match_rules(text: str, sep_end: int, rules: tuple[Rule, ...]) -> Span | None:
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
        span = _match_rules(text, hit.end(), rules)
        if span is not None:
            done = span.end
            yield span


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
        span = _match_rules(text, hit.end(), _DASH_RULES)
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
            span = _match_rules(text, hit.end(), _DOT_RULES) or _discord(text, hit.start())
        if span is not None:
            done = span.end
            yield span


_GOOGLE_KEY = re.compile(r"AIza[0-9A-Za-z_\-]{35}" + _END)  # a literal of its own: fast


def find_google_keys(text: str) -> Iterator[Span]:
    """Google API keys (`AIza…`)."""
    for m in _GOOGLE_KEY.finditer(text):
        if at_boundary(text, m.start()) and not is_placeholder(m.group()):
            yield Span(m.start(), m.end(), "google_api_key")


# Led by its rarest letter (`re` stops at fewer places); a hit starts 3 characters earlier.
_HOOKS = re.compile(r"k(?<=hook)(?=s[./])")
_SLACK_HOOK = re.compile(
    r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/\-]{20,})"
)
_DISCORD_HOOK = re.compile(r"hooks/(\d{17,20}/[A-Za-z0-9_\-]{60,70})" + _END)


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


# `:` after a header or JSON key that names a credential; one scan for all of them.
_COLON_SCAN = re.compile(  # the names end in a quote or one of `eElLx`: one test rejects most `:`
    r":(?:(?<=\d:)(?:(?=A[\w\-]{34})|(?<=\d{4}:)(?=[\w.\-*]{1,63}:[\w.\-@]{1,63}:))"
    r"|(?<=[\"'eElLx]:)(?:(?<=ookie:|OOKIE:)|(?<=auth[\"']:)|(?<=auth\\\":)"
    r"|(?<=key_id[\"']:|SESSID[\"']:)|(?<=key_id\\\":)|(?<=SESSIONID[\"']:)"
    r"|(?<=essionid[\"']:)|" + PHONE_WORD_LOOKBEHINDS + "))"
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
    if m is None or not at_boundary(text, start) or not _hex_mix(m.group()[:32]):
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
