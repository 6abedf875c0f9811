"""SFT export: selected trajectories → train/val shards in a trainer's format, plus a manifest.

Streaming (one chunk of trajectories in memory), deterministic (same arguments on the same
snapshot → byte-identical shards and manifest), self-checked (fails loudly), to any fsspec URL,
atomic (written into a staging folder installed at the end: `_sft_output`; a failed export
leaves no files). Every selected trajectory is either exported or counted under `dropped` in its
split with the reason (`untrained`, `duplicate`, `no_credit_rows`, `too_long`).
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import trajlake
from trajlake._names import refuse_inside_lake
from trajlake._progress import NullProgress, Progress
from trajlake.errors import SftSelfCheckFailed, TrajlakeError, missing_extra
from trajlake.export._export_record import record_export, source_snapshot
from trajlake.export._sft_credit import CreditSource, resolve_credit
from trajlake.export._sft_formats import (
    FORMATTERS,
    SFT_FORMATS,
    STEP_LOSS_MASK_DEFAULT,
    add_step_loss_mask,
    encode_row,
)
from trajlake.export._sft_output import ParquetShards, Shards, StagedFolder
from trajlake.export._sft_select import (
    ACTIONS,
    Actions,
    DropReason,
    SftConversation,
    Split,
    check_mask_rule,
    credit_weights,
    select_conversations,
    split_of,
)

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, Snapshot, SnapshotRef

_CHECK_CHUNK = 500
_NAMED_IDS = 5
"""How many trajectory ids an error names."""


@dataclass
class SplitCounts:
    """What one split holds, and what was selected for it but left out."""

    trajectories: int = 0
    samples: int = 0
    turns: int = 0
    trained_turns: int = 0
    trained_tokens: int | None = 0
    """Stored completion tokens of trained turns (tokenized: trained tokens); None if unknown."""
    text_action_trajectories: int = 0
    """Exported trajectories whose actions were text (see `actions`)."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Selected trajectories not exported, by reason."""
    files: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class SftExportReport:
    """What an SFT export wrote."""

    path: str
    format: str
    snapshot_id: int
    manifest: str
    splits: dict[str, SplitCounts]
    seconds: float
    export_id: str | None = None
    """Key of the export's row in the lake's `exports` table."""
    credit_snapshot: int | None = None
    """Snapshot the credit run was read at (None without a run)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "path": self.path,
            "format": self.format,
            "snapshot": self.snapshot_id,
            "credit_snapshot": self.credit_snapshot,
            "manifest": self.manifest,
            "splits": {name: asdict(counts) for name, counts in self.splits.items()},
            "seconds": round(self.seconds, 3),
            "export_id": self.export_id,
        }

    def summary(self) -> str:
        """One line for people."""
        parts = []
        for name, c in self.splits.items():
            part = (
                f"{name}: {c.samples} samples from {c.trajectories} trajectories, "
                f"{c.trained_turns}/{c.turns} turns trained"
            )
            if c.dropped:
                why = ", ".join(f"{n} {reason}" for reason, n in sorted(c.dropped.items()))
                part += f", {sum(c.dropped.values())} left out ({why})"
            parts.append(part)
        return f"{self.format} export of snapshot {self.snapshot_id} to {self.path}: " + "; ".join(
            parts or ["nothing selected"]
        )


def _check_weights(
    lake: LakeStore, credit: CreditSource, min_weight: float, batch: list[SftConversation]
) -> None:
    """Re-read the run's rows and compare every assistant weight with weight×mask."""
    ids = [c.trajectory_id for c in batch]
    stored = credit_weights(lake, credit.run, ids, at=credit.snapshot)
    for conv in batch:
        for m, w, turn in zip(conv.messages, conv.weights, conv.turns, strict=True):
            if w is None:
                continue
            expected = stored.get(conv.trajectory_id, {}).get(turn) if turn is not None else None
            if expected is None or (expected if expected >= min_weight else 0.0) != w:
                raise SftSelfCheckFailed(
                    f"weight {w} of turn {turn} of {conv.trajectory_id!r} does not match credit "
                    f"run {credit.run!r} ({expected}); the export is inconsistent with the run"
                )
            assert m["role"] == "assistant"


def _load_tokenizer(tokenizer: Any) -> tuple[Any, str, str | None]:
    """(tokenizer object, its name, sha256 of its chat template)."""
    if isinstance(tokenizer, str):
        try:
            from transformers import AutoTokenizer
        except ImportError as e:
            raise missing_extra("transformers", "hf") from e
        name = tokenizer
        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    else:
        name = str(getattr(tokenizer, "name_or_path", type(tokenizer).__name__))
    template = getattr(tokenizer, "chat_template", None)
    digest = hashlib.sha256(template.encode()).hexdigest() if isinstance(template, str) else None
    return tokenizer, name, digest


@dataclass
class _Current:
    """The conversation being tokenized and how many rows it has given so far."""

    split: Split
    conv: SftConversation
    rows: int = 0


def _tokenized_rows(
    tokenizer: Any,
    convs: Iterator[tuple[Split, SftConversation]],
    max_tokens: int | None,
    stats: Any,
    done: Callable[[Split, SftConversation, int], None],
) -> Iterator[tuple[Split, dict[str, Any]]]:
    """Tokenized rows with their split, each verified by decoding against its conversation.

    `done(split, conv, rows)` follows each conversation's last row: `tokenize_conversations`
    yields all rows of a conversation before it asks for the next one.
    """
    try:
        from trajlake.export.tokenize import tokenize_conversations, verify_sample
    except ImportError as e:
        raise TrajlakeError(
            "the tokenized SFT format needs trajlake.export.tokenize, not in this installation"
        ) from e
    current: list[_Current] = []

    def finish() -> None:
        if current:
            last = current.pop()
            done(last.split, last.conv, last.rows)

    def feed() -> Iterator[SftConversation]:
        for split, conv in convs:
            finish()
            current.append(_Current(split, conv))
            yield conv
        finish()

    for row in tokenize_conversations(tokenizer, feed(), max_tokens=max_tokens, stats=stats):
        now = current[0]
        assert row["trajectory_id"] == now.conv.trajectory_id
        # The self-check of every export: weighted tokens decode to the trained turns.
        verify_sample(tokenizer, row, now.conv)
        now.rows += 1
        yield now.split, row


def _new_token_stats() -> Any:
    from trajlake.export.tokenize import TokenizedStats

    return TokenizedStats()


def _check_tokenized(row: dict[str, Any]) -> int:
    weights = row["loss_weight"]
    trained = sum(1 for w in weights if w > 0)
    where = f"sample {row.get('sample_index')} of {row['trajectory_id']!r}"
    if trained == 0:  # tokenize_conversations yields no such sample: a broken invariant
        raise SftSelfCheckFailed(f"{where} has no trained token")
    attended = sum(1 for a in row.get("attention_mask") or weights if a)
    if trained >= attended:
        raise SftSelfCheckFailed(f"{where} trains on every token (all-ones mask)")
    return trained


def _add(total: int | None, more: int | None) -> int | None:
    return None if total is None or more is None else total + more


@dataclass(frozen=True)
class _Options:
    """The arguments of one export that shape its rows and counts."""

    format: str
    where: str | None
    credit: CreditSource | None
    min_weight: float
    max_tokens: int | None
    val_frac: float
    seed: int
    actions: Actions
    step_loss_mask: bool


class _Export:
    """One export's shards and counts: conversations in, rows written, drops counted."""

    def __init__(
        self, lake: LakeStore, snapshot: int, opts: _Options, staged: StagedFolder, shard_mb: float
    ) -> None:
        self.lake, self.snapshot, self.opts = lake, snapshot, opts
        self.counts: dict[str, SplitCounts] = {"train": SplitCounts(), "val": SplitCounts()}
        self.untrained: list[str] = []
        self._batch: list[SftConversation] = []
        limit = int(shard_mb * 1024 * 1024)
        fs, root = staged.fs, staged.root
        self.shards = {s: Shards(fs, root, s, "jsonl", limit) for s in ("train", "val")}
        self.parquet = {s: ParquetShards(fs, root, s, limit) for s in ("train", "val")}

    def split(self, task_id: str | None, trajectory_id: str) -> Split:
        return split_of(task_id or trajectory_id, self.opts.seed, self.opts.val_frac)

    def drop(self, trajectory_id: str, task_id: str | None, reason: DropReason) -> None:
        dropped = self.counts[self.split(task_id, trajectory_id)].dropped
        dropped[reason] = dropped.get(reason, 0) + 1
        if reason in ("untrained", "too_long"):
            self.untrained.append(trajectory_id)

    def count(self, split: Split, conv: SftConversation) -> None:
        c = self.counts[split]
        c.trajectories += 1
        c.turns += sum(1 for m in conv.messages if m["role"] == "assistant")
        c.trained_turns += conv.trained_messages
        c.text_action_trajectories += conv.text_actions
        if self.opts.format != "tokenized":
            c.samples += 1
            c.trained_tokens = _add(c.trained_tokens, conv.trained_tokens)

    def conversations(self, progress: Progress) -> Iterator[tuple[Split, SftConversation]]:
        """Selected, checked, trained conversations with their split; the rest counted."""
        opts = self.opts
        for conv in select_conversations(
            self.lake,
            at=self.snapshot,
            where=opts.where,
            credit=None if opts.credit is None else opts.credit.run,
            min_weight=opts.min_weight,
            actions=opts.actions,
            on_drop=lambda o, why: self.drop(o["trajectory_id"], o.get("task_id"), why),
        ):
            progress.advance(1)
            # By construction only assistant turns carry a weight, so no all-ones mask can occur.
            assert all(w is None or m["role"] == "assistant" for m, w in zip(
                conv.messages, conv.weights, strict=True
            )), conv.trajectory_id  # fmt: skip
            if conv.trained_messages == 0:
                self.drop(conv.trajectory_id, conv.task_id, "untrained")
                continue
            if opts.credit is not None:
                self._batch.append(conv)
                if len(self._batch) >= _CHECK_CHUNK:
                    self.check_batch()
            split = self.split(conv.task_id, conv.trajectory_id)
            if opts.format != "tokenized":
                self.count(split, conv)
            yield split, conv

    def check_batch(self) -> None:
        if self._batch and self.opts.credit is not None:
            _check_weights(self.lake, self.opts.credit, self.opts.min_weight, self._batch)
        self._batch.clear()

    def tokenized_done(self, split: Split, conv: SftConversation, rows: int) -> None:
        if rows:
            self.count(split, conv)
        else:  # every trained turn was longer than max_tokens with the context
            self.drop(conv.trajectory_id, conv.task_id, "too_long")

    def write(self, progress: Progress, tokenizer: Any, token_stats: Any) -> None:
        opts = self.opts
        if opts.format == "tokenized":
            rows = _tokenized_rows(
                tokenizer,
                self.conversations(progress),
                opts.max_tokens,
                token_stats,
                self.tokenized_done,
            )
            for split, row in rows:
                trained = _check_tokenized(row)
                c = self.counts[split]
                c.samples += 1
                c.trained_tokens = (c.trained_tokens or 0) + trained
                self.parquet[split].write_row(row)
        else:
            to_row = FORMATTERS[opts.format]
            for split, conv in self.conversations(progress):
                row = to_row(conv)
                if opts.step_loss_mask:
                    row = add_step_loss_mask(opts.format, row)
                self.shards[split].write((encode_row(row) + "\n").encode())
        self.check_batch()
        for name, shard in self.shards.items():
            shard.close()
            self.parquet[name].close()
            tokenized = opts.format == "tokenized"
            self.counts[name].files = self.parquet[name].files if tokenized else shard.files

    def require_trained(self) -> None:
        """Fail when any selected trajectory has no trained turn in the export."""
        if not self.untrained:
            return
        named = ", ".join(repr(t) for t in sorted(self.untrained)[:_NAMED_IDS])
        more = "" if len(self.untrained) <= _NAMED_IDS else ", …"
        raise SftSelfCheckFailed(
            f"{len(self.untrained)} selected trajectories have no trained turn in the export "
            f"({named}{more}): every turn is masked or weighted below --min-weight, or (tokenized) "
            "no trained turn fits --max-tokens; narrow --where, lower --min-weight, raise "
            "--max-tokens, or drop --require-trained to leave them out (counted in the manifest)"
        )


def _manifest(
    lake: LakeStore,
    snapshot: Snapshot,
    opts: _Options,
    mask_rule: str,
    tokenizer: tuple[str | None, str | None],
    token_stats: Any,
    extra: dict[str, Any],
) -> dict[str, Any]:
    snap = snapshot.snapshot_id
    credit = opts.credit
    return {
        "format": opts.format,
        "lake": lake.uri,
        "snapshot": {
            "id": snap,
            "timestamp": snapshot.timestamp,
            "tags": sorted(t.name for t in lake.tags() if t.snapshot_id == snap),
        },
        "where": opts.where,
        "credit_run": None if credit is None else credit.run,
        "credit_snapshot": None if credit is None else credit.snapshot,
        "credit_input_snapshots": [] if credit is None else list(credit.input_snapshots),
        "mask_rule": mask_rule,
        "min_weight": opts.min_weight,
        "actions": opts.actions,
        "step_loss_mask": opts.step_loss_mask,
        "dedupe": "content_hash",
        "tokenizer": tokenizer[0],
        "chat_template_sha256": tokenizer[1],
        "tokenization": asdict(token_stats) if token_stats is not None else None,
        "max_tokens": opts.max_tokens,
        "val_frac": opts.val_frac,
        "seed": opts.seed,
        **extra,
        "trajlake_version": trajlake.__version__,
    }


def _check_arguments(
    format: str,
    tokenizer: Any,
    max_tokens: int | None,
    shard_mb: float,
    actions: str,
    step_loss_mask: bool | None,
) -> None:
    if format not in SFT_FORMATS:
        raise ValueError(f"unknown SFT format {format!r}; known: {', '.join(SFT_FORMATS)}")
    if (format == "tokenized") != (tokenizer is not None):
        raise ValueError("--tokenizer is required by, and only used by, --format tokenized")
    if max_tokens is not None and format != "tokenized":
        raise ValueError("--max-tokens applies to --format tokenized only")
    if shard_mb <= 0:
        raise ValueError(f"shard_mb must be positive, got {shard_mb}")
    if actions not in ACTIONS:
        raise ValueError(f"unknown --actions {actions!r}; known: {', '.join(ACTIONS)}")
    if step_loss_mask and format == "tokenized":
        raise ValueError("--step-loss-mask applies to the JSONL formats (tokenized: loss_weight)")


def _retire_allow_untrained(allow_untrained: bool | None, require_trained: bool) -> bool:
    """`require_trained` in force, from the retired `allow_untrained` where a caller passes it."""
    if allow_untrained is None:
        return require_trained
    warnings.warn(
        "allow_untrained is retired: trajectories without a trained turn are left out and "
        "counted in the manifest (`dropped`); pass require_trained=True to fail instead",
        DeprecationWarning,
        stacklevel=3,
    )
    return require_trained or not allow_untrained


def export_sft(
    lake: LakeStore,
    out: str,
    *,
    format: str,
    at: SnapshotRef = None,
    where: str | None = None,
    credit: str | None = None,
    mask: str | None = None,
    min_weight: float = 0.0,
    tokenizer: Any = None,
    max_tokens: int | None = None,
    val_frac: float = 0.0,
    seed: int = 0,
    shard_mb: float = 100.0,
    actions: Actions = "native",
    require_trained: bool = False,
    step_loss_mask: bool | None = None,
    allow_untrained: bool | None = None,
    progress: Progress | None = None,
) -> SftExportReport:
    """Write an SFT dataset of the selected trajectories to the folder `out` (path or URL).

    Args:
        lake: The lake, read at snapshot `at` (pinned once).
        out: Folder for `train-NNNNN.jsonl`, `val-NNNNN.jsonl` (`.parquet` for the tokenized
            format) and `manifest.json`. Written only when the whole export succeeds; a
            previous export in it is replaced, other files in it are kept.
        format: openai | trl | sharegpt | axolotl | tokenized (see `_sft_formats`).
        at, where: Snapshot and SQL condition on `trajectories`.
        credit: Credit run weighting assistant turns by weight×mask (default: all turns 1.0);
            a run computed after `at` is read where it was committed, after checking that it
            read the exported trajectories' content.
        mask: Mask rule the run must have been computed with (checked, not recomputed).
        min_weight: Turns weighted below this are not trained.
        tokenizer: Hugging Face tokenizer (name, path or object) for `tokenized`.
        max_tokens: Longest tokenized sample (`tokenized` only).
        val_frac, seed: Share of tasks in `val`, by a seeded hash of the task id.
        shard_mb: Roll to a new shard after about this many MB.
        actions: For agents whose actions are text (mini-swe-agent, SWE-agent text-parsed):
            `native` exports the text they emitted; `tool-calls` converts the parsed actions
            into tool calls and their observations into `tool` messages.
        require_trained: Fail when a selected trajectory has no trained turn, instead of
            leaving it out (it is counted under `dropped` either way).
        step_loss_mask: Put Orchard's per-message `step_loss_mask` (1 = train) on messages
            (default: trl and axolotl yes, openai and sharegpt no).
        allow_untrained: Retired (untrained trajectories are now left out and counted);
            `False` means `require_trained=True`. Warns.
        progress: Receives one unit per trajectory.

    Raises:
        OutputInsideLake: `out` lies inside the lake (checked before anything is written).
        SftSelfCheckFailed: A trajectory has no trained turn (with `require_trained`), a sample
            trains on every token, its weights differ from the credit run, or the credit run
            read other content than the exported trajectories.
    """
    _check_arguments(format, tokenizer, max_tokens, shard_mb, actions, step_loss_mask)
    require_trained = _retire_allow_untrained(allow_untrained, require_trained)
    split_of("", seed, val_frac)  # validates val_frac
    refuse_inside_lake(out, lake.location.uri, what="SFT export folder")
    progress = progress or NullProgress()
    start = time.perf_counter()
    snapshot = source_snapshot(lake, at)
    snap = snapshot.snapshot_id
    source = resolve_credit(lake, credit, snap) if credit is not None else None
    mask_rule = check_mask_rule(lake, credit, mask, at=snap if source is None else source.snapshot)
    slm = STEP_LOSS_MASK_DEFAULT.get(format, False) if step_loss_mask is None else step_loss_mask
    opts = _Options(format, where, source, min_weight, max_tokens, val_frac, seed, actions, slm)
    tok_name = template_hash = None
    if tokenizer is not None:
        tokenizer, tok_name, template_hash = _load_tokenizer(tokenizer)
    token_stats = _new_token_stats() if format == "tokenized" else None
    staged = StagedFolder(out)
    try:
        export = _Export(lake, snap, opts, staged, shard_mb)
        progress.start("export sft", None)
        export.write(progress, tokenizer, token_stats)
        progress.finish()
        if require_trained:
            export.require_trained()
        counts = export.counts
        splits = {s: c for s, c in counts.items() if c.trajectories or c.dropped or s == "train"}
        extra = {
            "require_trained": require_trained,
            "shard_mb": shard_mb,
            "splits": {s: asdict(c) for s, c in splits.items()},
        }
        manifest = _manifest(
            lake, snapshot, opts, mask_rule, (tok_name, template_hash), token_stats, extra
        )
        with staged.fs.open(f"{staged.root}/manifest.json", "wb") as f:
            text = json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
            f.write(text.encode())
        staged.install()
    except BaseException:
        staged.discard()
        raise
    root = staged.target
    export_id = record_export(lake, manifest, out if "://" in out else root)
    seconds = time.perf_counter() - start
    return SftExportReport(
        out,
        format,
        snap,
        f"{root}/manifest.json",
        splits,
        seconds,
        export_id,
        None if source is None else source.snapshot,
    )
