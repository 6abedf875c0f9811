"""Secret redaction: typed, deterministic placeholders in every free-text field the lake writes.

A secret becomes `<SECRET:kind:n>`, numbered per kind and trajectory (`Redactor`). Credentials
are replaced by default, personal data (e-mail, phone) on request; an `AllowList` keeps named
values. Ingest, labels and the proxy all redact through this package, so whatever path a text
takes into the lake it meets the same rules.

Its own package, below ingest and the proxy, because both use it and neither owns it; it
imports only the core modules (`schema`). Modules: `_redactor` (numbering, one scan per
trajectory), `_trajectory` and `_json` (where the text of a record or JSON value is),
`_patterns` (the detectors, put together from `_providers`, `_commands`, `_forms`,
`_keyvalue`, `_personal`, with `_context` and `_gate`), `_uri` (credentials in source URLs),
`_evaluate` (recall and false positives on a labelled corpus). Provider rules are ported from
gitleaks (MIT, `LICENSE-gitleaks`).
"""

from __future__ import annotations

from trajlake.redact._allow import AllowList, as_allow_list
from trajlake.redact._evaluate import evaluate
from trajlake.redact._json import json_slots, redact_calls, redact_json
from trajlake.redact._patterns import FAMILY, KINDS, PLACEHOLDER_RE, find_secrets
from trajlake.redact._redactor import (
    PERSONAL_KINDS,
    Finding,
    Redactor,
    family,
    placeholder,
    redact_bytes,
    redact_text,
)
from trajlake.redact._trajectory import (
    redact_row,
    redact_rows,
    redact_trajectory,
    row_texts,
    trajectory_texts,
)
from trajlake.redact._uri import redact_uri

__all__ = [
    "FAMILY",
    "KINDS",
    "PERSONAL_KINDS",
    "PLACEHOLDER_RE",
    "AllowList",
    "Finding",
    "Redactor",
    "as_allow_list",
    "evaluate",
    "family",
    "find_secrets",
    "json_slots",
    "placeholder",
    "redact_bytes",
    "redact_calls",
    "redact_json",
    "redact_row",
    "redact_rows",
    "redact_text",
    "redact_trajectory",
    "redact_uri",
    "row_texts",
    "trajectory_texts",
]
