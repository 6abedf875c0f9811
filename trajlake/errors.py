"""The whole trajlake exception tree: every error about data, lake state or environment.

One flat module below everything, so any layer can raise and any caller can catch without importing
the layer that raised. Everything derives from `TrajlakeError`, which the CLI reports as one line
(exit 1); bad arguments stay `ValueError`/`TypeError`, and the two errors that are both
(`UnsafeName`, `OutputInsideLake`) subclass both. Messages say what to do, not only what failed.
"""

from __future__ import annotations


class TrajlakeError(Exception):
    """Base class of every error trajlake raises about data, lake state or environment."""


class LakeNotFound(TrajlakeError):
    """No lake exists at the given URI (create it with `trajlake init` or `create=True`)."""


class LakeAlreadyExists(TrajlakeError):
    """A lake already exists where a new one was to be created."""


class LakeCorrupt(TrajlakeError):
    """The lake's metadata or tables are inconsistent; `trajlake validate` says what."""


class UnsupportedStorage(TrajlakeError):
    """The URI scheme or storage option is not supported by this installation."""


class StorageUnreachable(TrajlakeError):
    """The lake's storage cannot be reached (credentials, endpoint or network)."""


class MissingExtra(TrajlakeError):
    """An optional dependency is missing; the message names the `pip install` that fixes it."""


class LockTimeout(TrajlakeError):
    """The lake's commit lock could not be acquired in time."""


class CommitConflict(TrajlakeError):
    """A commit could not be completed after retrying concurrent-writer conflicts."""


class UnsupportedTableFeature(TrajlakeError):
    """A lake table uses a Delta protocol feature trajlake's commit writer does not implement."""


class NoSuchSnapshot(TrajlakeError):
    """A snapshot id, tag or timestamp does not resolve to a snapshot of this lake."""


class SnapshotExpired(NoSuchSnapshot):
    """The snapshot existed but fell out of the retention window; tag snapshots to keep them."""


class NoSuchTag(NoSuchSnapshot):
    """No tag has this name."""


class TagAlreadyExists(TrajlakeError):
    """Tags are immutable: a tag with this name already exists."""


class NoSuchTable(TrajlakeError):
    """The lake has no table with this name."""


class NoSuchTrajectory(TrajlakeError):
    """No trajectory has this id at the requested snapshot."""


class SchemaMismatch(TrajlakeError):
    """Data to be written does not match the table's schema; the message names the columns."""


class ReadOnlyQuery(TrajlakeError):
    """A statement that would modify data was sent to the read-only query session."""


class QueryTimeout(TrajlakeError):
    """A lake query ran past its timeout and was stopped; the message says how to raise it."""


class QueryOutOfMemory(TrajlakeError):
    """A lake query needed more memory than its limit; the message says how to raise it."""


class InvalidRecord(TrajlakeError):
    """A source record failed to parse or validate (file, line and field in the message)."""


class TrajectoryIdConflict(InvalidRecord):
    """Strict mode: a trajectory's id is taken by a trajectory with other messages."""


class FormatDetectionError(TrajlakeError):
    """The input's format could not be detected; pass `--format` explicitly."""


class NoSuchCreditRun(TrajlakeError):
    """No credit run has this name at the snapshot read."""


class MaskRuleMismatch(TrajlakeError):
    """The mask rule asked for is not the one the credit run stored its masks with."""


class SftSelfCheckFailed(TrajlakeError):
    """An SFT export failed one of its self-checks; the message names the sample and the fix."""


class JudgeError(TrajlakeError):
    """The judge endpoint failed after all retries (check base_url, model and api key)."""


class LabelFormatError(TrajlakeError):
    """A label file is not in the format it was read as."""


class ChatTemplateError(TrajlakeError):
    """The chat template cannot render a conversation or locate its assistant turns."""


class MaskVerificationError(TrajlakeError):
    """A tokenized sample's loss mask does not match the conversation's trained assistant turns."""


class ModelFormatError(TrajlakeError):
    """A saved model is missing files, uses another format version or would need unpickling."""


class NoSuchModel(TrajlakeError):
    """No model with this id or path exists."""


class TrainingError(TrajlakeError):
    """Training cannot run on this data (no positives, empty split, diverged loss)."""


class UnsafeName(TrajlakeError, ValueError):
    """A name that becomes a file or folder name (tag, model id, recipe name) is not safe."""


class PublishError(TrajlakeError):
    """Publishing is refused or failed (no token, visibility mismatch, inconsistent export)."""


class OutputInsideLake(TrajlakeError, ValueError):
    """An output path lies inside the lake, where a stray file can make the lake unreadable."""


def missing_extra(package: str, extra: str) -> MissingExtra:
    """Build the error for a missing optional dependency, with the exact install command."""
    return MissingExtra(
        f"{package} is required for this feature; install it with: pip install 'trajlake[{extra}]'"
    )
