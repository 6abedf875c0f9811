"""Secret detectors rule by rule: each format found exactly, each near-miss left alone.

Fakes are generated from a fixed seed with the shapes of real credentials (never real ones),
assembled at run time so that this file is no bait for secret scanners.
"""

from __future__ import annotations

import base64
import json
import random
import string
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from trajlake.redact._patterns import (
    FAMILY,
    GATE,
    KINDS,
    TRIGGERS,
    find_secrets,
    may_hold_secrets,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "redaction"
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # as in conftest.py
_R = random.Random(7)
_A = string.ascii_letters + string.digits
_HEX = "0123456789abcdef"


def _r(n: int, alphabet: str = _A) -> str:
    return "".join(_R.choice(alphabet) for _ in range(n))


def _docker() -> str:
    return base64.b64encode(f"ci:{_r(24)}".encode()).decode()


def _env_blob() -> str:
    return base64.b64encode(f"DB_HOST=pg\nDB_PASSWORD={_r(18)}\n".encode()).decode()


# (kind, template with {s}, factory of the secret)
RULES: list[tuple[str, str, Callable[[], str]]] = [
    ("openai_key", "OPENAI_API_KEY={s}", lambda: "sk-proj-" + _r(40) + "T3BlbkFJ" + _r(40)),
    ("anthropic_key", "x-api-key: {s}", lambda: "sk-ant-api03-" + _r(93) + "AA"),
    ("github_token", "git push https://x:{s}@github.com/o/r", lambda: "ghp_" + _r(36)),
    ("github_token", "GH_TOKEN={s}", lambda: "github_pat_" + _r(22) + "_" + _r(59)),
    ("gitlab_token", "PRIVATE-TOKEN: {s}", lambda: "glpat-" + _r(20)),
    (
        "slack_token",
        "token={s}",
        lambda: f"xoxb-{_r(11, '0123456789')}-{_r(12, '0123456789')}-{_r(24)}",
    ),
    ("hf_token", "huggingface-cli login --token {s}", lambda: "hf_" + _r(34, string.ascii_letters)),
    ("stripe_key", "stripe.api_key = '{s}'", lambda: "sk_live_" + _r(24)),
    ("npm_token", "//registry.npmjs.org/:_authToken={s}", lambda: "npm_" + _r(36)),
    ("pypi_token", "twine upload -p {s} dist/*", lambda: "pypi-AgEIcHlwaS5vcmc" + _r(80)),
    ("sendgrid_key", "key {s}", lambda: "SG." + _r(22) + "." + _r(43)),
    ("shopify_token", "X-Shopify-Access-Token: {s}", lambda: "shpat_" + _r(32, _HEX)),
    ("linear_key", "Authorization: {s}", lambda: "lin_api_" + _r(40)),
    ("digitalocean_token", "doctl auth init -t {s}", lambda: "dop_v1_" + _r(64, _HEX)),
    ("doppler_token", "doppler run --token {s}", lambda: "dp.st." + _r(43)),
    ("heroku_key", "token: {s}", lambda: "HRKU-AA" + _r(58)),
    (
        "age_key",
        "# age key\n{s}",
        lambda: "AGE-SECRET-KEY-1" + _r(58, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"),
    ),
    (
        "mailgun_key",
        "curl --user 'api:{s}' https://api.mailgun.net/v3",
        lambda: "key-" + _r(32, _HEX),
    ),
    ("discord_token", "client.run('{s}')", lambda: "M" + _r(25) + "." + _r(6) + "." + _r(38)),
    (
        "discord_webhook",
        "https://discord.com/api/webhooks/{s}",
        lambda: "1" + _r(17, "0123456789") + "/" + _r(68),
    ),
    (
        "telegram_token",
        "https://api.telegram.org/bot{s}/getMe",
        lambda: _r(10, "0123456789") + ":AA" + _r(33),
    ),
    (
        "slack_webhook",
        "https://hooks.slack.com/services/{s}",
        lambda: f"T{_r(10)}/B{_r(10)}/{_r(24)}",
    ),
    ("google_api_key", "key={s}", lambda: "AIza" + _r(35)),
    (
        "jwt",
        "Bearer-less: {s}",
        lambda: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0." + _r(43),
    ),
    (
        "aws_key",
        "aws_access_key_id = {s}",
        lambda: "AKIA" + _r(16, string.ascii_uppercase + "234567"),
    ),
    ("aws_session_token", "AWS_SESSION_TOKEN={s}", lambda: "IQoJb3JpZ2luX2Vj" + _r(900, _A + "+/")),
    ("aws_session_token", '"SessionToken": "{s}"', lambda: "FwoGZXIvYXdzE" + _r(400, _A + "+/")),
    ("gcp_key_id", '{{"type": "service_account", "private_key_id": "{s}"}}', lambda: _r(40, _HEX)),
    ("azure_key", "AZURE_CLIENT_SECRET={s}", lambda: _r(3) + "8Q~" + _r(34)),
    ("databricks_token", "token = {s}", lambda: "dapi" + _r(32, _HEX)),
    ("twilio_key", "TWILIO_API_KEY={s}", lambda: "SK" + _r(32, _HEX)),
    ("docker_auth", '{{"auths": {{"ghcr.io": {{"auth": "{s}"}}}}}}', _docker),
    (
        "session_cookie",
        "Cookie: theme=dark; sessionid={s}",
        lambda: _r(32, string.ascii_lowercase + "0123456789"),
    ),
    (
        "session_cookie",
        "curl -b 'PHPSESSID={s}' https://shop.io",
        lambda: _r(26, string.ascii_lowercase + "0123456789"),
    ),
    (
        "url_signature",
        "https://b.s3.amazonaws.com/k?X-Amz-Expires=60&X-Amz-Signature={s}",
        lambda: _r(64, _HEX),
    ),
    ("password", "mysql -uroot -p{s} shop", lambda: _r(12) + "!"),
    ("password", "sshpass -p '{s}' ssh deploy@10.0.0.3", lambda: _r(14)),
    ("password", "kubectl create secret generic db --from-literal=db-pass={s}", lambda: _r(16)),
    (
        "url_password",
        "DATABASE_URL=postgres://app:{s}@db.internal/app",
        lambda: _r(10) + "#" + _r(6),
    ),
    ("secret", "echo {s} | base64 -d > .env", _env_blob),
    ("phone", "Phone: {s}", lambda: "+44 20 7946 " + _r(4, "0123456789")),
    ("phone", '"mobile": "{s}"', lambda: "(415) 555-" + _r(4, "0123456789")),
    # provider formats added with the fresh held-out set
    ("gcp_access_token", "$ gcloud auth print-access-token\n{s}\n", lambda: "ya29.a0" + _r(120)),
    ("groq_key", "Groq(api_key='{s}')", lambda: "gsk_" + _r(52)),
    ("replicate_token", "token: {s}", lambda: "r8_" + _r(37)),
    ("xai_key", '{{"api_key": "{s}"}}', lambda: "xai-" + _r(80)),
    ("twilio_key", "client = Client('{s}', secret)", lambda: "SK" + _r(32, _HEX)),
    (
        "postman_key",
        "newman run c.json --api-key {s}",
        lambda: f"PMAK-{_r(24, _HEX)}-{_r(34, _HEX)}",
    ),
    ("vault_token", "token                {s}", lambda: "hvs." + _r(24)),
    ("supabase_token", "supabase login --token {s}", lambda: "sbp_" + _r(40, _HEX)),
    ("newrelic_key", "key {s}", lambda: "NRAK-" + _r(27, string.ascii_uppercase + "0123456789")),
    ("notion_token", "Client(auth='{s}')", lambda: "ntn_" + _r(11, "0123456789") + _r(35)),
    ("notion_token", "auth={s}", lambda: "secret_" + _r(43)),
    ("atlassian_token", "jira --token {s}", lambda: "ATATT3" + _r(186)),
    ("square_token", "SQUARE_ACCESS_TOKEN={s}", lambda: "EAAA" + _r(60)),
    ("square_token", "Square(access={s})", lambda: "sq0atp-" + _r(22)),
    ("sentry_token", "sentry-cli --auth-token {s}", lambda: "sntrys_eyJpYXQiO" + _r(80, _A + "+/")),
    (
        "mailchimp_key",
        "mc.set_config({{'api_key': x, 'k': '{s}'}})",
        lambda: _r(32, _HEX) + "-us14",
    ),
    ("terraform_token", 'token = "{s}"', lambda: _r(14) + ".atlasv1." + _r(67)),
    ("grafana_token", "grafana {s}", lambda: "glsa_" + _r(32) + "_" + _r(8, _HEX)),
    ("grafana_token", "grafana {s}", lambda: "glc_" + _r(60) + "=="),
    ("datadog_key", "docker run -e DD_API_KEY={s} agent", lambda: _r(32, _HEX)),
    ("cloudflare_token", "CLOUDFLARE_API_TOKEN={s}", lambda: _r(40)),
    ("docker_pat", "echo {s} | docker login -u ci --password-stdin", lambda: "dckr_pat_" + _r(27)),
    ("rubygems_token", ":rubygems_api_key: {s}", lambda: "rubygems_" + _r(48, _HEX)),
    (
        "nuget_key",
        "dotnet nuget push a.nupkg --api-key {s}",
        lambda: "oy2" + _r(43, string.ascii_lowercase + "0123456789"),
    ),
    ("crates_token", "cargo login {s}", lambda: "cio" + _r(32)),
    # context-bound password forms
    ("password", "machine api.heroku.com\n  login ops@acme.io\n  password {s}", lambda: _r(14)),
    ("password", "db.internal:5432:appdb:app_user:{s}", lambda: _r(12) + "*4"),
    ("password", "redis-cli -h cache -a '{s}' ping", lambda: _r(14)),
    ("password", "curl -u admin:{s} http://es.internal:9200/", lambda: _r(14)),
    ("password", 'variable "db_password" {{\n  default = "{s}"\n}}', lambda: _r(14)),
    ("secret", "$ cat config/master.key\n{s}\n", lambda: _r(32, _HEX)),
]


def test_a_putty_key_is_replaced_whole() -> None:
    body = "\n".join(_r(64, _A + "+/") for _ in range(4))
    key = (
        "PuTTY-User-Key-File-3: ssh-rsa\nEncryption: none\nComment: k\nPublic-Lines: 1\n"
        + _r(64, _A + "+/")
        + "\nPrivate-Lines: 4\n"
        + body
        + "\nPrivate-MAC: "
        + _r(64, _HEX)
    )
    text = f"$ cat deploy.ppk\n{key}\n$ "
    assert [(text[s.start : s.end], s.kind) for s in find_secrets(text)] == [(key, "private_key")]


@pytest.mark.parametrize(("kind", "template", "make"), RULES, ids=[r[0] for r in RULES])
def test_rule_finds_the_secret_exactly(kind: str, template: str, make: Callable[[], str]) -> None:
    secret = make()
    text = template.format(s=secret)
    spans = [s for s in find_secrets(text) if text[s.start : s.end] == secret]
    assert [s.kind for s in spans] == [kind], find_secrets(text)


NEAR_MISSES = [
    # provider look-alikes
    "npm_config_cache=/home/runner/.npm npm_package_version=1.2.3",
    "SG.DATASET.load_from_disk('path/to/the/dataset/files.arrow')",
    "key-value stores; the key-0123456789abcdefXYZ is not a hex key",
    "Note:Added a test; Error:AttributeError: 'NoneType' object has no attribute 'get'",
    "AGE-SECRET-KEY-1... goes in keys.txt (a truncated example)",
    "shpat_ is the prefix of Shopify admin tokens; dop_v1_ of DigitalOcean ones",
    "IQoJb3JpZ2luX2Vj is how AWS session tokens start",
    # commands without a password
    "mysql -u root -p\nEnter password:",
    'mysql -h "$DB_HOST" -u app -p"$DB_PASS" shop',
    "mkdir -p /tmp/build && cp -p a b && pytest -p no:cacheprovider",
    'sshpass -p "$SSH_PASS" ssh deploy@host uptime',
    # docker / cookies / url parameters
    '{"auths": {"ghcr.io": {}}, "credsStore": "desktop"}',
    '{"auth": "basic", "realm": "Registry"}',
    "Set-Cookie: theme=dark; Path=/; Max-Age=31536000",
    "Set-Cookie: session=eyJ0ZXN0IjoxfQ.aR0RzA.EPfabONtaqW-UmYpVBiDMHj; Domain=example.com",
    "SESSION_COOKIE_NAME = 'sessionid'",
    "https://example.com/search?q=sig&sig=short",
    # base64 that is no .env file with a secret
    "echo " + base64.b64encode(b"DEBUG=true\nPORT=8080\n").decode() + " | base64 -d",
    # context: fixtures in code and tests, test output, kernel paths
    "    def test_urls(self):\n        URLValidator()('http://user:pass/word@example.com')",
    "<output>\nPASS: 34.23234 | None -> 34.2\nPASS: 0.0.0.0:8000 -> 0.0.0.0:8000\n</output>",
    "grep: /proc/sys/net/ipv6/conf/all/stable_secret: Input/output error",
    "cat > reproduce.py <<'EOF'\ndata = {'username': 'testuser', 'password1': 'password123'}\nEOF",
    "[File: /repo/tests/test_db.py (40 lines total)]\n12:        'PASSWORD': 'somepassword',",
    'SESSION_KEY = "_auth_user_id"\nHASH_SESSION_KEY = "_auth_user_hash"',
    "CustomUserForm cleaned password: pbkdf2_sha256$...",
    # provenance e-mails
    "# Copyright (c) 2019 Jane Maintainer <jane.maintainer@gmail.com>",
    "# SPDX-FileCopyrightText: 2025-present Omar Haddad <omar@haddad.dev>",
    "    author_email='sloria1@gmail.com',",
    'authors = [\n  { name = "Kai Tanaka", email = "kai.tanaka@fastmail.com" },\n]',
    "# Authors: Gael Varoquaux <gael@normalesup.org>\n#          Olivier Grisel <og@ens.fr>",
    "Last-Translator: FULL NAME <EMAIL@ADDRESS>\nLanguage-Team: LANGUAGE <LL@li.org>",
    "Author-email: andrey.petrov@shazow.net",
    "please write to the list at sympy@googlegroups.com",
    'use "openhands@all-hands.dev" as the user.email',
    "    def test_validators(self):\n        (validate_email, 'email@here.com', None),",
    # phone look-alikes
    "Successfully installed numpy-1.26.4 pandas-2.2.1; Date: 2026-12-01 10:20:30 +0000",
    "diff --git a/x b/x\n@@ -10,7 +10,8 @@\n+12345678\n+        total = count + 1234567",
    "score: +1 355 votes; offset +3600 s; ISBN 978-0-13-468599-1; IP 192.168.100.200",
    "Phone model: iPhone 15 Pro Max 256GB, released 2023-09-22",
    '{"id": "call_20261201123456", "phone_count": 5551234567}',
    # near-misses of the rules added with the fresh held-out set
    "ya29. is how Google OAuth access tokens start; gsk_, r8_ and xai- are LLM key prefixes",
    "model: xai-grok-2-latest-vision-preview",
    "SK12345678901234567890123456789012 holds digits only; SKIP_TESTS=1",
    "Postman keys look like PMAK-<24 hex>-<34 hex>; Vault's hvs.token_accessor_lookup_field",
    "NRAK-ABCDEFGHIJKLMNOPQRSTUVWXYZA has no digit",
    "secret_key_base_for_the_staging_environment_v2 = load()",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-us14 is padding",
    "tokens for app.terraform.io hold .atlasv1. in the middle",
    "rubygems_version: 3.4.10; docker login reads dckr_pat_ tokens from stdin",
    "dotnet nuget push a.nupkg --api-key $NUGET_API_KEY",
    "cioabcdefghijklmnopqrstuvwxyzabcdef is lower case only",
    "DD_SITE=datadoghq.eu\nCLOUDFLARE_ZONE_ID=023e105f4ecef8ad9ca31a8372d0c353",
    "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPublic-Lines: 2\nAAAAC3NzaC1lZDI1NTE5",
    "machine github.com\n  login octocat\n  password $GITHUB_TOKEN",
    "src/app.py:1234:5:E501:line-too-long",
    "localhost:5432:*:postgres:*",
    "redis-cli -a $REDIS_PASSWORD ping; ls -a /tmp",
    "curl -u admin: http://localhost:9200; curl -u elastic:changeme http://localhost:9200",
    'variable "db_password" {\n  type      = string\n  sensitive = true\n}',
    "$ cat config/master.key\ncat: config/master.key: No such file or directory",
    '__author__ = "Jane Doe"\n__author_email__ = "jane.doe@fastmail.com"',
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_miss_is_left_alone(text: str) -> None:
    assert find_secrets(text) == []


def test_values_longer_than_256_characters_are_replaced_whole() -> None:
    token = "FQoGZXIvYXdzE" + _r(1200, _A + "+/") + "=="
    for text in (f"AWS_SESSION_TOKEN={token}", f'aws_session_token = "{token}"'):
        spans = find_secrets(text)
        assert [(text[s.start : s.end], s.kind) for s in spans] == [(token, "aws_session_token")]
    password = _r(400)
    text = f"APP_PASSWORD={password}"
    assert [text[s.start : s.end] for s in find_secrets(text)] == [password]


def test_a_hash_sign_in_a_url_password_is_part_of_it() -> None:
    text = "redis://:Xk29mq#Pz7vWq@cache.internal:6379/0"
    assert [(text[s.start : s.end], s.kind) for s in find_secrets(text)] == [
        ("Xk29mq#Pz7vWq", "url_password")
    ]


def test_proc_paths_are_no_secrets_however_often_they_repeat() -> None:
    line = "grep: /proc/sys/net/ipv6/conf/eth{}/stable_secret: Input/output error\n"
    text = "".join(line.format(i) for i in range(1500))
    assert find_secrets(text) == []


def test_code_context_keeps_weak_fixtures_and_catches_strong_values() -> None:
    listing = "cat -n tests/test_login.py\n     4\t    client.login(password='{}')"
    assert find_secrets(listing.format("wrongpassword")) == []
    strong = _r(10) + "!9Zq"
    spans = find_secrets(listing.format(strong))
    assert [s.kind for s in spans] == ["password"]
    # The same weak value in configuration is a password: `.env` files are no code.
    env = "cat .env\nDB_PASSWORD=hunter2x"
    assert [s.kind for s in find_secrets(env)] == ["password"]


def test_commit_authors_in_session_repositories_stay_personal_data() -> None:
    text = "git log -1\ncommit 3f2a9b1\nAuthor: Dana Kim <dana.kim@startup.ai>"
    assert [s.kind for s in find_secrets(text)] == ["email"]
    text = "git commit --author='Priya Raman <priya.raman@fastmail.com>' -m fix"
    assert [s.kind for s in find_secrets(text)] == ["email"]


def test_kinds_skip_detectors_and_filter_spans() -> None:
    text = f"mail dana.kim@startup.ai key {'ghp_' + _r(36)} tel +44 20 7946 0381"
    assert {s.kind for s in find_secrets(text)} == {"email", "github_token", "phone"}
    assert [s.kind for s in find_secrets(text, kinds={"github_token"})] == ["github_token"]
    assert {s.kind for s in find_secrets(text, kinds={"email", "phone"})} == {"email", "phone"}


def test_every_kind_has_a_family() -> None:
    assert set(FAMILY) == set(KINDS)
    assert set(FAMILY.values()) == {
        "cloud", "vcs", "ai_provider", "saas", "registry", "private_key", "token", "password",
        "generic_secret", "personal",
    }  # fmt: skip
    assert {k for k, f in FAMILY.items() if f == "personal"} == {"email", "phone"}


def test_the_gate_lets_every_known_secret_through() -> None:
    assert all(t for t in TRIGGERS)
    assert not may_hold_secrets("def f(x):\n    return x * 2\n")
    for name in ("positives.jsonl", "holdout.jsonl"):
        for line in (DATA / name).read_text().splitlines():
            text = json.loads(line)["text"]
            assert GATE.search(text), text


def _corpus_texts(pattern: str, limit: int) -> list[str]:
    from trajlake.ingest import detect, expand_sources
    from trajlake.ingest._adapter import ParsedTrajectory
    from trajlake.redact import trajectory_texts

    texts = []
    for source in expand_sources([str(p) for p in sorted(CORPUS.glob(pattern))][:limit]):
        with source.open() as f:
            for parsed in detect(source).read(source, f):
                if isinstance(parsed, ParsedTrajectory):
                    texts.append("\n\0\n".join(trajectory_texts(parsed.record)))
    return texts


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus not present")
@pytest.mark.parametrize(
    "pattern",
    ["01_sweagent_traj/**/*.traj", "05_coding_cli_sessions/aider/*/.aider.chat.history.md"],
)
def test_real_coding_trajectories_hold_no_credential_findings(pattern: str) -> None:
    texts = _corpus_texts(pattern, 8)
    assert texts
    found = [
        (s.kind, text[s.start : s.end])
        for text in texts
        for s in find_secrets(text)
        if FAMILY[s.kind] != "personal"
    ]
    assert found == []


@pytest.mark.parametrize(
    "text",
    [
        "password=" * 20000,
        '"password": "' * 20000,
        "session=" * 20000,
        "mysql " + " -pX" * 20000,
        ("x" * 40 + " base64 -d ") * 4000,
        "Phone: " * 20000,
        "a:" * 100000,
    ],
    ids=["kv", "quoted", "cookie", "mysql", "base64", "phone", "colons"],
)
def test_repetitive_text_is_scanned_in_linear_time(text: str) -> None:
    # Each hit reads a bounded stretch once; before, a value read up to 16 KB per hit.
    start = time.process_time()
    find_secrets(text)
    assert time.process_time() - start < 2.0
