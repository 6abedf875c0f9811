"""The user-facing `Lake` that `trajlake.open_lake` returns: storage plus ingest, SQL and export.

A thin composition: each method hands the lake to the function of the layer that owns the work
(`trajlake.ingest`, `trajlake.query`, `trajlake.export`), so storage (`trajlake.lake.LakeStore`,
which this class extends) never imports its callers, and code below this layer takes a store.
Ingest and export are imported on first use: opening a lake to run one query should not pay
for the ingest adapters or the SFT exporter.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trajlake.errors import NoSuchTrajectory
from trajlake.lake import LakeStore, SnapshotRef
from trajlake.query import (
    QueryResult,
    QuerySession,
    SqlParams,
    ViewCatalog,
    lake_database,
    open_session,
    sql,
    view_catalog,
)
from trajlake.schema import CanonicalTrajectory, Stage

if TYPE_CHECKING:
    import duckdb

    from trajlake._progress import Progress
    from trajlake.export.groups import GroupsExportReport
    from trajlake.export.jsonl import ExportReport
    from trajlake.export.sft import SftExportReport
    from trajlake.ingest import IngestReport
    from trajlake.ingest.labels import LabelFormat, LabelReport
    from trajlake.publish import PublishReport
    from trajlake.redact import AllowList

__all__ = ["Lake", "init_lake", "open_lake"]


def open_lake(
    uri: str | os.PathLike[str],
    *,
    create: bool = False,
    storage_options: Mapping[str, str] | None = None,
) -> Lake:
    """Open the lake at `uri` (local path, `memory://NAME`, `s3://…`, `gs://…`, `az://…`).

    Args:
        uri: where the lake lives.
        create: create the lake if it does not exist yet.
        storage_options: delta-rs storage options for object stores (credentials, endpoint).
    """
    return Lake.open(uri, create=create, storage_options=storage_options)


def init_lake(
    uri: str | os.PathLike[str], *, storage_options: Mapping[str, str] | None = None
) -> Lake:
    """Create a new lake (LakeAlreadyExists if one is there)."""
    return Lake.init(uri, storage_options=storage_options)


class Lake(LakeStore):
    """A trajectory lake: versioned Delta tables pinned together by lake snapshots, which you
    ingest into, query with SQL at any snapshot or tag, and export from."""

    def ingest(
        self,
        inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        format: str = "auto",
        generation: int | None = None,
        run_id: str | None = None,
        stage: Stage | None = None,
        strict: bool = False,
        batch_size: int = 1000,
        redact: bool = True,
        redact_personal: bool = False,
        allow_list: str | os.PathLike[str] | AllowList | None = None,
        dedupe_content: bool = False,
        workers: int | None = None,
        labels: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        progress: Progress | None = None,
    ) -> IngestReport:
        """Ingest trajectory files (paths, directories, globs, fsspec URLs, .gz/.zst).

        Args:
            inputs: one input or several.
            format: a format name (`trajlake.ingest.format_names()`) or 'auto' (by content).
            generation, run_id, stage: set on every ingested trajectory; `run_id` also
                scopes every id (`<id>@<run_id>`), so runs that reuse rollout ids stay apart.
            strict: raise on the first bad record instead of quarantining it, and on a
                trajectory id taken by other messages (checked per commit, before it is
                written) instead of keeping it under a derived id.
            batch_size: trajectories per commit (memory stays bounded by it).
            redact: replace secrets with typed placeholders (`<SECRET:openai_key:1>`).
            redact_personal: also replace personal data (e-mail addresses, phone numbers).
            allow_list: values never redacted: an allow-list file (see docs/redaction.md) or
                a `trajlake.redact.AllowList`.
            dedupe_content: also skip trajectories whose content hash is already stored
                (the same rollout from two sources; off by default because distinct samples
                can share their text — the `duplicates` view lists such groups).
            workers: parsing processes for big inputs (None: one per core).
            labels: verifier outputs to attach right after (see `label`); the label report
                is in `IngestReport.labels`. They are read first: inputs holding no label file
                raise `FormatDetectionError` before any trajectory is stored.
            storage_options: fsspec options for remote inputs.
            progress: receives progress (bytes read).
        """
        from trajlake.ingest import IngestOptions, commit_labels, ingest, prepare_labels

        items = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
        options = IngestOptions(
            generation=generation,
            run_id=run_id,
            stage=stage,
            strict=strict,
            batch_size=batch_size,
            redact=redact,
            redact_personal=redact_personal,
            allow_list=allow_list,
            dedupe_content=dedupe_content,
            workers=workers,
        )
        # Labels are read first: a label input that is not one fails before anything is stored.
        read = (
            None
            if labels is None
            else prepare_labels(labels, run_id=run_id, storage_options=storage_options)
        )
        report = ingest(
            self,
            [os.fspath(i) for i in items],
            format=format,
            options=options,
            storage_options=storage_options,
            progress=progress,
        )
        if read is not None:
            report.labels = commit_labels(self, read).to_dict()
            report.snapshot_id = report.labels["snapshot"]
        return report

    def label(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        format: LabelFormat = "auto",
        run_id: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> LabelReport:
        """Attach verifier outcomes (SWE-bench, sb-cli, Terminal-Bench, CSV/JSONL) as labels.

        Labels match trajectories by id, else by task id + run id; the `outcomes` view gives
        each trajectory's effective outcome. Re-labelling with the same files adds nothing.
        """
        from trajlake.ingest.labels import attach_labels

        return attach_labels(
            self, paths, format=format, run_id=run_id, storage_options=storage_options
        )

    # Reading ---------------------------------------------------------------------------------

    def duckdb(self) -> duckdb.DuckDBPyConnection:
        """The lake's sandboxed DuckDB database (query sessions are cursors of it)."""
        return lake_database(self)

    def view_catalog(self) -> ViewCatalog:
        """Per-snapshot view schemas of the lake's database (built lazily, kept for reuse)."""
        return view_catalog(self)

    def query(
        self,
        at: SnapshotRef = None,
        *,
        timeout: float | None = None,
        memory_limit: int | str | None = None,
        threads: int | None = None,
    ) -> QuerySession:
        """A read-only DuckDB session with a view per table, pinned to one snapshot (limits as
        in `sql`)."""
        return open_session(self, at, timeout=timeout, memory_limit=memory_limit, threads=threads)

    def sql(
        self,
        query: str,
        params: SqlParams = None,
        *,
        at: SnapshotRef = None,
        timeout: float | None = None,
        memory_limit: int | str | None = None,
        threads: int | None = None,
    ) -> QueryResult:
        """Run read-only SQL on a pinned snapshot; convert with to_arrow/to_polars/to_pandas.

        `params` binds values to placeholders (`?` with a sequence, `$name` with a mapping):
        `lake.sql("SELECT * FROM trajectories WHERE task_id = ?", [task])` needs no quoting.

        `timeout` (seconds, default none) stops a longer query with `QueryTimeout`; Ctrl-C
        stops it with KeyboardInterrupt. `memory_limit` (bytes or '8GB'; default min(4 GiB,
        half the memory)) and `threads` (default min(cores, 8)) bound DuckDB; a query over the
        limit spills to `_trajlake/sqltmp-*` where it can, else fails with `QueryOutOfMemory`.
        """
        return sql(
            self,
            query,
            params,
            at=at,
            timeout=timeout,
            memory_limit=memory_limit,
            threads=threads,
        )

    def trajectory(self, trajectory_id: str, *, at: SnapshotRef = None) -> CanonicalTrajectory:
        """One trajectory with all its messages, as a canonical record."""
        from trajlake.export.jsonl import read_canonical

        found = read_canonical(self, at=at, ids=[trajectory_id])
        if not found:
            raise NoSuchTrajectory(
                f"no trajectory {trajectory_id!r} at snapshot {self.snapshot(at).snapshot_id}"
            )
        return CanonicalTrajectory.model_validate(found[0])

    # Export ----------------------------------------------------------------------------------

    def export_jsonl(
        self,
        out: str,
        *,
        at: SnapshotRef = None,
        where: str | None = None,
        progress: Progress | None = None,
    ) -> ExportReport:
        """Write canonical JSONL (one trajectory per line) of the selected trajectories."""
        from trajlake.export.jsonl import export_jsonl

        return export_jsonl(self, out, at=at, where=where, progress=progress)

    def export_atif(
        self,
        out: str,
        *,
        at: SnapshotRef = None,
        where: str | None = None,
        progress: Progress | None = None,
    ) -> ExportReport:
        """Write Harbor ATIF trajectories: a folder of `<id>.json` + `manifest.jsonl`, or one
        `.jsonl` file (see `trajlake.export.atif.export_atif`)."""
        from trajlake.export.atif import export_atif

        return export_atif(self, out, at=at, where=where, progress=progress)

    def export_sft(self, out: str, *, format: str, **options: Any) -> SftExportReport:
        """Write a loss-weighted SFT dataset (see `trajlake.export.sft.export_sft` for options:
        at, where, credit, mask, min_weight, tokenizer, max_tokens, val_frac, seed, shard_mb)."""
        from trajlake.export.sft import export_sft

        return export_sft(self, out, format=format, **options)

    def export_groups(self, out: str, **options: Any) -> GroupsExportReport:
        """Write BAR-balanced rollout groups with GRPO/RLOO advantages for RL or listwise
        reranking (see `trajlake.export.groups.export_groups` for options: at, where, size,
        max_rollouts, rho_min, rho_max, rho_target, relaxed, backfill_aborted, group_by,
        reward, grpo_eps, grpo_ddof, val_frac, seed, shard_mb)."""
        from trajlake.export.groups import export_groups

        return export_groups(self, out, **options)

    # Publishing ------------------------------------------------------------------------------

    def publish(self, repo_id: str, **options: Any) -> PublishReport:
        """Publish a snapshot (a Parquet config per table) or an export folder as the Hugging
        Face dataset `repo_id`, private by default (see `trajlake.publish.publish` for options:
        at, where, tables, private, license, pretty_name, from_export, dry_run, token,
        endpoint, shard_mb)."""
        from trajlake.publish import publish

        return publish(self, repo_id, **options)
