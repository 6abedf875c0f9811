"""The dataset card (`README.md`): YAML front matter the Hub and `datasets` read, then the
text people read — what each config holds, how to load it, where the rows come from, and the
sha256 of every file.

The front matter holds `configs:` (one per table, or one with a split per export split, each
listing its files), `license`, `pretty_name`, `tags` and `size_categories`. No `dataset_info`:
`datasets` infers the features from the Parquet schema, and a hand-written copy could only
disagree with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from trajlake.schema import RECORD_TYPES, json_columns

__all__ = [
    "export_card",
    "export_rows",
    "markdown_table",
    "render_card",
    "size_category",
    "snapshot_card",
]

TAGS = ("trajlake", "agent-trajectories", "llm-agents")
_SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"))
_LARGER = ((1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"))


def size_category(rows: int) -> str:
    """The Hub's `size_categories` value for a dataset of `rows` examples."""
    for bound, name in (*_SIZES, *_LARGER):
        if rows < bound:
            return name
    return "n>100M"


def render_card(front_matter: Mapping[str, Any], body: str) -> str:
    """README.md text: `---`-fenced YAML, a blank line, then the Markdown body."""
    text = yaml.safe_dump(dict(front_matter), sort_keys=False, allow_unicode=True, width=100)
    return f"---\n{text}---\n\n{body.rstrip()}\n"


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text or "—"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table (pipes in cells escaped, None as a dash)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _front(
    configs: list[dict[str, Any]], license: str, pretty_name: str, rows: int, extra_tags: list[str]
) -> dict[str, Any]:
    return {
        "license": license,
        "pretty_name": pretty_name,
        "tags": list(dict.fromkeys([*TAGS, *extra_tags])),
        "size_categories": [size_category(rows)],
        "configs": configs,
    }


def _row_meaning(table: str) -> str:
    doc = (RECORD_TYPES[table].__doc__ or table).strip().splitlines()[0]
    return doc.split(": ", 1)[1].rstrip(".") if ": " in doc else doc


def _files_section(files: Iterable[Mapping[str, Any]]) -> str:
    rows = [(f"`{f['path']}`", f.get("rows"), f.get("bytes"), f"`{f['sha256']}`") for f in files]
    return "## Files\n\n" + markdown_table(["file", "rows", "bytes", "sha256"], rows)


def _provenance_sections(provenance: Mapping[str, Any]) -> list[str]:
    sections = []
    sources = provenance.get("sources") or []
    header = ["source format", "harness", "task source", "trajectories", "source files"]
    keys = ["source_format", "harness", "task_source", "trajectories", "source_files"]
    sections.append(
        "### Sources\n\n" + markdown_table(header, [[s[k] for k in keys] for s in sources])
    )
    policies = [(p["policy_model"], p["trajectories"]) for p in provenance["policy_models"]]
    table = markdown_table(["policy model", "trajectories"], policies)
    sections.append(f"### Policy models\n\n{table}")
    red = provenance["redactions"]
    sections.append(
        "### Redaction\n\nSecrets were replaced at ingest by typed placeholders "
        f"(`<SECRET:kind:n>`): {red['placeholders']} placeholders in "
        f"{red['trajectories_redacted']} trajectories."
    )
    if provenance.get("label_sources"):
        rows = [(s["source"], s["labels"]) for s in provenance["label_sources"]]
        sections.append("### Outcome labels\n\n" + markdown_table(["source", "labels"], rows))
    if provenance.get("credit_runs"):
        header = ["run", "estimator", "params", "source snapshot", "trajectories", "turns"]
        keys = ["run_name", "estimator", "params", "source_snapshot", "trajectories", "turns"]
        runs = [[r[k] for k in keys] for r in provenance["credit_runs"]]
        sections.append("### Credit runs\n\n" + markdown_table(header, runs))
    if provenance.get("score_models"):
        rows = [(s["model_id"], s["scores"]) for s in provenance["score_models"]]
        sections.append("### Value-model scores\n\n" + markdown_table(["model", "scores"], rows))
    return sections


def _empty_note(empty: Sequence[str] | None) -> str:
    if not empty:
        return ""
    names = ", ".join(f"`{t}`" for t in empty)
    return f"\n\nNot published, as they hold no rows in this selection: {names}."


def _snapshot_line(snapshot: Mapping[str, Any]) -> str:
    tags = ", ".join(f"`{t}`" for t in snapshot.get("tags") or []) or "none"
    return f"lake snapshot **{snapshot['id']}** of {snapshot['timestamp']} (tags: {tags})"


def _licence_line(license: str) -> str:
    declared = "not declared" if license == "unknown" else "declared by the publisher"
    return (
        f"- Licence: `{license}`, {declared} (the lake does not store the licences of its "
        "sources: check them before publishing)"
    )


def snapshot_card(manifest: Mapping[str, Any], repo_id: str | None) -> str:
    """The card of a lake snapshot published table by table (`manifest` as written)."""
    tables: Mapping[str, Mapping[str, Any]] = manifest["tables"]
    configs = [
        {
            "config_name": name,
            **({"default": True} if i == 0 else {}),
            "data_files": [{"split": "train", "path": [f["path"] for f in t["files"]]}],
        }
        for i, (name, t) in enumerate(tables.items())
    ]
    rows = int(tables["trajectories"]["rows"]) if "trajectories" in tables else 0
    front = _front(configs, manifest["license"], manifest["pretty_name"], rows, [])
    snapshot = manifest["snapshot"]
    where = manifest.get("where")
    selection = f"trajectories where `{where}`" if where else "all trajectories"
    overview = markdown_table(
        ["config", "rows", "files", "a row is"],
        [(f"`{n}`", t["rows"], len(t["files"]), _row_meaning(n)) for n, t in tables.items()],
    )
    name = repo_id or "PATH_OR_REPO_ID"
    loads = "\n".join(f'{n} = load_dataset("{name}", "{n}", split="train")' for n in tables)
    json_cols = sorted({c for n in tables for c in json_columns(n)})
    versions = ", ".join(f"{t} v{v}" for t, v in snapshot["table_versions"].items())
    body = [
        f"# {manifest['pretty_name']}",
        f"Agent trajectories published with trajlake {manifest['trajlake_version']} from "
        f"{_snapshot_line(snapshot)}: {selection}, and every table's rows that belong to them.",
        "## Configurations\n\nOne configuration per lake table, each a `train` split; tables "
        f"join on `trajectory_id`.\n\n{overview}" + _empty_note(manifest.get("empty_tables")),
        "## Loading\n\n```python\nfrom datasets import load_dataset\n\n" + loads + "\n```\n\n"
        "Map columns (`rewards`) are lists of `{key, value}`; JSON columns ("
        + ", ".join(f"`{c}`" for c in json_cols)
        + ") hold JSON text (`json.loads`).",
        "## Provenance\n\n"
        + "\n".join(
            [
                f"- Lake snapshot: {snapshot['id']} ({snapshot['operation']}, "
                f"{snapshot['timestamp']}); tags: "
                + (", ".join(f"`{t}`" for t in snapshot["tags"]) or "none"),
                f"- Table versions: {versions}",
                f"- Selection: `{where}`" if where else "- Selection: all trajectories",
                _licence_line(manifest["license"]),
                f"- Published with trajlake {manifest['trajlake_version']}; `manifest.json` "
                "lists every file with its rows and sha256",
            ]
        ),
        *_provenance_sections(manifest["provenance"]),
        _files_section(f for t in tables.values() for f in t["files"]),
    ]
    return render_card(front, "\n\n".join(body))


def _export_settings(manifest: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The export's scalar settings (format, where, credit run, tokenizer, ...), in key order."""
    skip = {"snapshot", "splits", "lake", "trajlake_version"}
    return [
        (f"`{k}`", f"`{v}`" if isinstance(v, str) else v)
        for k, v in sorted(manifest.items())
        if k not in skip and (v is None or isinstance(v, (str, int, float, bool)))
    ]


def export_rows(
    manifest: Mapping[str, Any], splits: Mapping[str, Sequence[Mapping[str, Any]]]
) -> int:
    """Rows of an export: its shards' `rows`, else its splits' samples (SFT) or rollouts
    (RL groups)."""
    listed = sum(int(f.get("rows") or 0) for files in splits.values() for f in files)
    if listed:
        return listed
    counts = manifest.get("splits") or {}
    return sum(
        int(c.get("samples", c.get("rollouts")) or 0)
        for c in counts.values()
        if isinstance(c, Mapping)
    )


def _count_columns(counts: Sequence[Any]) -> list[str]:
    """The integer counts the export's splits carry (`samples`, `rollouts`, ...), in order."""
    columns: dict[str, None] = {}
    for c in counts:
        if isinstance(c, Mapping):
            columns |= {k: None for k, v in c.items() if isinstance(v, int) and k != "files"}
    return list(columns)


def export_card(
    manifest: Mapping[str, Any],
    splits: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    kind: str,
    license: str,
    pretty_name: str,
    repo_id: str | None,
    provenance: Mapping[str, Any] | None,
) -> str:
    """The card of an export folder (SFT or groups): one `default` config, a split per export
    split (`val` is published as the Hub's `validation`)."""
    hub_split = {s: ("validation" if s == "val" else s) for s in splits}
    configs = [
        {
            "config_name": "default",
            "data_files": [
                {"split": hub_split[s], "path": [f["path"] for f in files]}
                for s, files in splits.items()
            ],
        }
    ]
    counts = manifest.get("splits") or {}
    rows = export_rows(manifest, splits)
    fmt = manifest.get("format")
    front = _front(configs, license, pretty_name, rows, [kind, *([fmt] if fmt else [])])
    columns = _count_columns([counts.get(s) for s in splits])
    summary = markdown_table(
        ["split", *columns, "files"],
        [
            (f"`{hub_split[s]}`", *[(counts.get(s) or {}).get(c) for c in columns], len(files))
            for s, files in splits.items()
        ],
    )
    name = repo_id or "PATH_OR_REPO_ID"
    snapshot = manifest.get("snapshot") or {}
    body = [
        f"# {pretty_name}",
        f"A trajlake {kind} export"
        + (f" (format `{fmt}`)" if fmt else "")
        + (f" of {_snapshot_line(snapshot)}" if "id" in snapshot else "")
        + ". `manifest.json` is the export's own manifest, as written.",
        f"## Splits\n\n{summary}",
        "## Loading\n\n```python\nfrom datasets import load_dataset\n\n"
        f'dataset = load_dataset("{name}")\n```',
        "## Export settings\n\n" + markdown_table(["setting", "value"], _export_settings(manifest)),
        "## Provenance\n\n"
        + "\n".join(
            [
                _licence_line(license),
                f"- Exported with trajlake {manifest.get('trajlake_version', 'unknown')}",
            ]
        ),
        *(
            [
                "The sections below count the trajectories the export's selection matched at "
                "its snapshot; the export may have left some out (see its split counts).",
                *_provenance_sections(provenance),
            ]
            if provenance
            else ["Sources and redaction counts: not read (publish with `--lake` to add them)."]
        ),
        _files_section(f for files in splits.values() for f in files),
    ]
    return render_card(front, "\n\n".join(body))
