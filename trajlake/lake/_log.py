"""The lake snapshot log and tags: the commit point that pins every table at one version.

Snapshot N is the file `_trajlake/log/<N>.json`, written after the data tables, under the
commit lock. A reader sees a table only at a version some snapshot pins, so data of a writer
that died before its log entry is never visible. `_head.json` is only a hint: the newest
entry is found by probing forward from it, so a crash between entry and hint loses nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from trajlake._names import check_name
from trajlake.errors import LakeCorrupt, NoSuchSnapshot, NoSuchTag, TagAlreadyExists, UnsafeName
from trajlake.lake._storage import MetadataStore
from trajlake.schema import TABLES

LOG_DIR = ("_trajlake", "log")
TAG_DIR = ("_trajlake", "tags")
_HEAD = "_head.json"
_PENDING = ("_trajlake", "pending.json")


@dataclass(frozen=True)
class Snapshot:
    """One lake snapshot: every table's pinned Delta version, and what the commit did."""

    snapshot_id: int
    timestamp: str
    operation: str
    tables: dict[str, int]
    summary: dict[str, Any] = field(default_factory=dict)
    parent_id: int | None = None

    @property
    def time(self) -> dt.datetime:
        """The commit time as an aware UTC datetime."""
        return dt.datetime.fromisoformat(self.timestamp)

    def to_json(self) -> bytes:
        """The log entry's bytes."""
        return json.dumps(asdict(self), sort_keys=True).encode()

    def successor(
        self, operation: str, tables: dict[str, int], summary: dict[str, Any]
    ) -> Snapshot:
        """The snapshot that follows this one, stamped now."""
        return Snapshot(
            self.snapshot_id + 1, utc_now(), operation, tables, summary, self.snapshot_id
        )

    @classmethod
    def from_json(cls, data: bytes) -> Snapshot:
        """Parse a log entry; a table the entry predates is pinned at its empty version 0."""
        entry = json.loads(data)
        entry["tables"] = {**dict.fromkeys(TABLES, 0), **entry["tables"]}
        return cls(**entry)


@dataclass(frozen=True)
class Tag:
    """An immutable name for a snapshot, with a note."""

    name: str
    snapshot_id: int
    note: str
    created_at: str

    def to_json(self) -> bytes:
        """The tag file's bytes."""
        return json.dumps(asdict(self), sort_keys=True).encode()


_LOOKS_LIKE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}")
_ENTRY = re.compile(r"\d{20}\.json")


def validate_tag_name(name: str) -> str:
    """Tag names become file names and must not read as another kind of snapshot reference.

    The rule of every name that becomes a path (`trajlake._names.check_name`: letters, digits,
    '.', '_' and '-', starting with a letter or digit, ≤ 128 characters, a full match so a
    trailing newline is refused); and not 'latest', not all digits (a snapshot id), not a date
    (a timestamp).
    """
    check_name("tag", name)
    if name == "latest" or name.isdigit() or _LOOKS_LIKE_TIME.match(name):
        raise UnsafeName(
            f"invalid tag name {name!r}: 'latest', plain numbers and dates are taken by snapshot "
            "references"
        )
    return name


def utc_now() -> str:
    """Current UTC time, ISO 8601 with microseconds."""
    return dt.datetime.now(dt.UTC).isoformat()


def _entry_name(snapshot_id: int) -> str:
    return f"{snapshot_id:020d}.json"


def _not_ours(path: str, what: str, error: Exception) -> LakeCorrupt:
    """The error for a metadata file that does not parse: it names the file, so a stray one
    (another program's output written into the lake) can be moved out."""
    return LakeCorrupt(
        f"{path} is not a {what} ({type(error).__name__}: {error}); if another program wrote "
        "it, move it out of the lake, then run `trajlake validate`"
    )


class SnapshotLog:
    """Reads and appends the snapshot log and tags of one lake."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._cache: dict[int, Snapshot] = {}

    def get(self, snapshot_id: int) -> Snapshot:
        """Snapshot by id (NoSuchSnapshot when absent)."""
        cached = self._cache.get(snapshot_id)
        if cached is not None:
            return cached
        name = _entry_name(snapshot_id)
        try:
            snap = Snapshot.from_json(self._store.read(*LOG_DIR, name))
        except FileNotFoundError:
            raise NoSuchSnapshot(f"no snapshot {snapshot_id} in this lake") from None
        except (ValueError, TypeError, KeyError) as e:
            raise _not_ours(self._store.path(*LOG_DIR, name), "snapshot log entry", e) from e
        self._cache[snapshot_id] = snap
        return snap

    def _exists(self, snapshot_id: int) -> bool:
        return snapshot_id in self._cache or self._store.exists(*LOG_DIR, _entry_name(snapshot_id))

    def latest(self) -> Snapshot:
        """The newest committed snapshot."""
        try:
            head = int(json.loads(self._store.read(*LOG_DIR, _HEAD))["snapshot_id"])
        except FileNotFoundError:
            head = 0
        except (ValueError, TypeError, KeyError):
            head = 0  # only a hint: a damaged one costs a listing of the log
        if not self._exists(head):
            names = [n for n in self._store.list(*LOG_DIR) if _ENTRY.fullmatch(n)]
            if not names:
                raise NoSuchSnapshot("the lake has no snapshot yet (was it initialised?)")
            head = int(names[-1].split(".")[0])
        while self._exists(head + 1):
            head += 1
        return self.get(head)

    def append(self, snap: Snapshot) -> Snapshot:
        """Write a new entry (the commit point), then move the head hint. Call under the lock."""
        self._store.write(snap.to_json(), *LOG_DIR, _entry_name(snap.snapshot_id), exclusive=True)
        self._cache[snap.snapshot_id] = snap
        self._store.write(json.dumps({"snapshot_id": snap.snapshot_id}).encode(), *LOG_DIR, _HEAD)
        return snap

    # Journal of the commit in flight ----------------------------------------------------------

    def begin(self, commit_id: str, tables: list[str]) -> None:
        """Record which tables a commit is about to write (before any data write)."""
        payload = {"commit_id": commit_id, "tables": tables, "started_at": utc_now()}
        self._store.write(json.dumps(payload).encode(), *_PENDING)

    def pending(self) -> dict[str, Any] | None:
        """The journal of a commit that started and never finished (its writer died), if any."""
        try:
            return dict(json.loads(self._store.read(*_PENDING)))
        except FileNotFoundError:
            return None

    def end(self) -> None:
        """Clear the journal once the snapshot entry is written (or the orphans undone)."""
        self._store.delete(*_PENDING)

    def all(self) -> list[Snapshot]:
        """Every snapshot, oldest first."""
        latest = self.latest().snapshot_id
        return [self.get(i) for i in range(0, latest + 1) if self._exists(i)]

    def at_time(self, when: dt.datetime) -> Snapshot:
        """The newest snapshot committed at or before `when` (binary search over ids)."""
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        lo, hi = 0, self.latest().snapshot_id
        if self.get(lo).time > when:
            raise NoSuchSnapshot(f"no snapshot at or before {when.isoformat()}")
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.get(mid).time <= when:
                lo = mid
            else:
                hi = mid - 1
        return self.get(lo)

    # Tags -----------------------------------------------------------------------------------

    def create_tag(self, name: str, snapshot_id: int, note: str) -> Tag:
        """Create an immutable tag (TagAlreadyExists if the name is taken)."""
        validate_tag_name(name)
        tag = Tag(name=name, snapshot_id=snapshot_id, note=note, created_at=utc_now())
        try:
            self._store.write(tag.to_json(), *TAG_DIR, f"{name}.json", exclusive=True)
        except FileExistsError:
            existing = self.get_tag(name)
            raise TagAlreadyExists(
                f"tag {name!r} already exists (snapshot {existing.snapshot_id}); tags are "
                "immutable: choose another name"
            ) from None
        return tag

    def get_tag(self, name: str) -> Tag:
        """Tag by name (NoSuchTag when absent)."""
        validate_tag_name(name)
        try:
            return Tag(**json.loads(self._store.read(*TAG_DIR, f"{name}.json")))
        except FileNotFoundError:
            raise NoSuchTag(f"no tag named {name!r}; `trajlake tags` lists them") from None
        except (ValueError, TypeError) as e:
            raise _not_ours(self._store.path(*TAG_DIR, f"{name}.json"), "tag", e) from e

    def tag_files(self) -> list[str]:
        """Names of the files in the tag folder (a tag is `<name>.json`)."""
        return list(self._store.list(*TAG_DIR))

    def tags(self) -> list[Tag]:
        """All tags, by snapshot then name (LakeCorrupt naming a file that is not a tag)."""
        tags = []
        for file in self.tag_files():
            if not file.endswith(".json"):  # e.g. the temporary file of a write in flight
                continue
            name = file.removesuffix(".json")
            try:
                tags.append(self.get_tag(validate_tag_name(name)))
            except ValueError as e:  # a file no tag name maps to
                raise _not_ours(self._store.path(*TAG_DIR, file), "tag", e) from e
        return sorted(tags, key=lambda t: (t.snapshot_id, t.name))
