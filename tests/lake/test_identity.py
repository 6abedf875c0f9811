"""Identity at commit: duplicates, updates (copy-on-write, time travel) and conflicts.

The trajectory is a real Claude Code session (tests/data/claude_code, MIT), read once and then
committed whole, cut short, or edited.
"""

from __future__ import annotations

import copy
import json
import signal
from pathlib import Path
from typing import Any

import pytest
from _writer_child import context
from deltalake import DeltaTable

import trajlake as tl
from trajlake.errors import TrajectoryIdConflict
from trajlake.lake import _tables
from trajlake.records import rows_for_table

SESSION = Path(__file__).parents[1] / "data" / "claude_code" / "marot_spotter" / "tool_heavy.jsonl"
_DERIVED = (
    "content_hash",
    "n_messages",
    "n_turns",
    "n_tool_calls",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "cached_tokens",
    "reasoning_tokens",
)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The session as a canonical record (read through the Claude Code adapter)."""
    scratch = tl.open_lake(tmp_path_factory.mktemp("scratch") / "lake", create=True)
    scratch.ingest(SESSION)
    (tid,) = scratch.sql("SELECT trajectory_id FROM trajectories").to_arrow().column(0).to_pylist()
    record = scratch.trajectory(tid).model_dump()
    assert len(record["messages"]) >= 12
    return record


def _version(record: dict[str, Any], n: int | None = None, **changes: Any) -> dict[str, Any]:
    """The first `n` messages of the record (derived fields recomputed on write)."""
    out = copy.deepcopy(record)
    out["messages"] = out["messages"][:n]
    for name in _DERIVED:
        out[name] = None
    out.update(changes)
    return out


def _edited(record: dict[str, Any], at: int) -> dict[str, Any]:
    """The record with one message's text changed (another run reusing the id)."""
    out = _version(record)
    message = out["messages"][at]
    message["content"] = (message["content"] or "") + " (another run)"
    return out


def _count(lake: tl.Lake, sql: str, at: Any = None) -> int:
    return int(lake.sql(sql, at=at).rows()[0][0])


def _messages_of(lake: tl.Lake, tid: str, at: Any = None) -> list[str | None]:
    return [m.content for m in lake.trajectory(tid, at=at).messages]


def test_same_content_again_is_a_duplicate(lake: tl.Lake, session: dict[str, Any]) -> None:
    first = lake.write([_version(session)])
    again = lake.write([_version(session)])
    assert again.snapshot_id == first.snapshot_id  # nothing new: no snapshot
    assert (again.added["trajectories"], again.duplicates["trajectories"]) == (0, 1)
    assert again.updated == {"trajectories": 0} and again.conflicts == {"trajectories": 0}
    (example,) = again.examples
    assert (example.kind, example.trajectory_id) == ("duplicate", session["trajectory_id"])


def test_extension_is_an_update_and_old_snapshots_keep_the_short_one(
    lake: tl.Lake, session: dict[str, Any]
) -> None:
    tid, total = session["trajectory_id"], len(session["messages"])
    lake.write([_version(session, 8)])
    label = {"label_id": "l1", "trajectory_id": tid, "resolved": True, "source": "human"}
    lake.commit({"labels": rows_for_table("labels", [label])})
    lake.tag("short")

    result = lake.write([_version(session)])
    assert (result.added["trajectories"], result.updated["trajectories"]) == (0, 1)
    assert result.added["messages"] == total
    assert result.examples[0].kind == "updated"
    assert _count(lake, "SELECT count(*) FROM trajectories") == 1
    assert _count(lake, "SELECT n_messages FROM trajectories") == total
    assert _count(lake, "SELECT count(*) FROM messages") == total
    assert _messages_of(lake, tid) == [m["content"] for m in session["messages"]]
    # The tag and the snapshot before still show the short version, whole.
    assert _count(lake, "SELECT n_messages FROM trajectories", at="short") == 8
    assert _count(lake, "SELECT count(*) FROM messages", at=result.previous_id) == 8
    assert len(_messages_of(lake, tid, at="short")) == 8
    # Rows of other tables keyed by the id are kept.
    assert _count(lake, f"SELECT count(*) FROM labels WHERE trajectory_id = '{tid}'") == 1
    # The tables stay plain Delta: another reader sees one current row, no deletion vectors.
    plain = DeltaTable(str(Path(lake.uri) / "tables" / "trajectories"))
    assert plain.to_pyarrow_table().column("trajectory_id").to_pylist() == [tid]
    assert "deletionVectors" not in (plain.protocol().writer_features or [])
    report = lake.validate()
    assert report.ok, report.problems

    # An older version read again is stale: counted, nothing written.
    stale = lake.write([_version(session, 5)])
    assert stale.snapshot_id == result.snapshot_id
    assert stale.duplicates["trajectories"] == 1
    assert "older version" in stale.examples[0].detail
    lake.maintain()
    assert lake.validate().ok
    assert _count(lake, "SELECT count(*) FROM messages") == total
    assert _count(lake, "SELECT count(*) FROM messages", at="short") == 8


def test_same_messages_with_another_hash_is_a_duplicate(
    lake: tl.Lake, session: dict[str, Any]
) -> None:
    lake.write([_version(session)])
    # As if the hash definition had changed: the messages decide.
    result = lake.write([_version(session, content_hash="0" * 64)])
    assert (result.duplicates["trajectories"], result.updated["trajectories"]) == (1, 0)
    assert result.snapshot_id == result.previous_id


def test_conflict_is_kept_under_a_derived_id(lake: tl.Lake, session: dict[str, Any]) -> None:
    tid = session["trajectory_id"]
    lake.write([_version(session)])
    other = _edited(session, 3)
    result = lake.write([other])
    assert (result.added["trajectories"], result.conflicts["trajectories"]) == (0, 1)
    (example,) = result.examples
    assert example.kind == "conflict" and example.stored_as is not None
    assert example.stored_as.startswith(f"{tid}~") and len(example.stored_as) == len(tid) + 9
    rows = lake.sql(
        "SELECT trajectory_id, attrs FROM trajectories ORDER BY trajectory_id"
    ).to_dicts()
    assert [r["trajectory_id"] for r in rows] == [tid, example.stored_as]
    assert json.loads(rows[1]["attrs"])["id_conflict_of"] == tid
    assert _messages_of(lake, example.stored_as) == [m["content"] for m in other["messages"]]
    assert _messages_of(lake, tid) == [m["content"] for m in session["messages"]]
    # Deterministic: the same conflicting record again adds nothing.
    again = lake.write([_edited(session, 3)])
    assert again.snapshot_id == result.snapshot_id and again.duplicates["trajectories"] == 1
    # The conflict copy grows like any trajectory: an update of the copy.
    longer = _edited(session, 3)
    longer["messages"].append({**longer["messages"][-1], "idx": len(longer["messages"])})
    grown = lake.write([longer])
    assert grown.updated["trajectories"] == 1 and grown.conflicts["trajectories"] == 0
    assert grown.examples[0].stored_as == example.stored_as
    assert _count(lake, "SELECT count(*) FROM trajectories") == 2


def test_strict_conflict_fails_before_anything_is_written(
    lake: tl.Lake, session: dict[str, Any]
) -> None:
    lake.write([_version(session)])
    head = lake.snapshot().snapshot_id
    newcomer = _version(session, trajectory_id="someone-else")
    with pytest.raises(TrajectoryIdConflict, match=session["trajectory_id"]) as raised:
        lake.write([newcomer, _edited(session, 2)], on_conflict="fail")
    assert "--run-id" in str(raised.value)
    assert lake.snapshot().snapshot_id == head
    assert _count(lake, "SELECT count(*) FROM trajectories") == 1


@pytest.mark.parametrize("order", ["short-first", "long-first"])
def test_extension_within_one_commit_keeps_the_longer(
    lake: tl.Lake, session: dict[str, Any], order: str
) -> None:
    tid, total = session["trajectory_id"], len(session["messages"])
    batch = [_version(session, 6), _version(session)]
    if order == "long-first":
        batch.reverse()
    result = lake.write(batch)
    assert (result.added["trajectories"], result.duplicates["trajectories"]) == (1, 1)
    assert result.added["messages"] == total
    assert _count(lake, "SELECT n_messages FROM trajectories") == total
    assert _messages_of(lake, tid) == [m["content"] for m in session["messages"]]


def test_same_id_twice_in_one_commit(lake: tl.Lake, session: dict[str, Any]) -> None:
    tid = session["trajectory_id"]
    same = lake.write([_version(session), _version(session)])
    assert (same.added["trajectories"], same.duplicates["trajectories"]) == (1, 1)
    other = _edited(session, 4)
    both = lake.write([_version(session, 9, trajectory_id="x"), _version(other, trajectory_id="x")])
    assert (both.added["trajectories"], both.conflicts["trajectories"]) == (1, 1)
    copy_id = both.examples[0].stored_as
    assert copy_id is not None and copy_id.startswith("x~")
    assert len(_messages_of(lake, "x")) == 9
    assert _messages_of(lake, copy_id) == [m["content"] for m in other["messages"]]
    assert _count(lake, f"SELECT count(*) FROM messages WHERE trajectory_id = '{tid}'") == len(
        session["messages"]
    )


def test_another_writer_catches_up_on_an_update_by_reading_only_what_changed(
    tmp_path: Path, session: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = tl.open_lake(tmp_path / "lake", create=True)
    other = tl.open_lake(tmp_path / "lake")
    writer.write([_version(session, 8)])
    for i in range(3):  # other trajectories, in files of their own
        writer.write([_version(session, 4, trajectory_id=f"other-{i}")])
    assert other.write([_version(session, 8)]).duplicates["trajectories"] == 1  # keys cached
    writer.write([_version(session)])

    reads: list[list[str]] = []
    original = _tables.read_parquet

    def spy(location: Any, uris: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append([u.rsplit("/", 1)[-1] for u in uris])
        return original(location, uris, *args, **kwargs)

    monkeypatch.setattr("trajlake.lake._dedupe.read_parquet", spy)
    result = other.write([_version(session)])
    assert result.duplicates["trajectories"] == 1 and result.updated["trajectories"] == 0
    # One read of the files that left and one of those that arrived, per table: the files
    # of the untouched trajectories are not read again.
    assert len(reads) == 4, reads
    assert other.write([_version(session, 5)]).duplicates["trajectories"] == 1


def _die_updating(lake_uri: str, record_path: str) -> None:
    """Commit the record read from `record_path`; SIGKILL before the snapshot log entry."""
    import os

    from trajlake.lake._log import SnapshotLog

    def append(self: SnapshotLog, snap: Any) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)

    SnapshotLog.append = append  # type: ignore[method-assign]
    record = json.loads(Path(record_path).read_text())
    tl.open_lake(lake_uri).write([record])


def test_update_killed_before_the_log_entry_leaves_the_previous_snapshot(
    lake: tl.Lake, session: dict[str, Any], tmp_path: Path
) -> None:
    tid, total = session["trajectory_id"], len(session["messages"])
    lake.write([_version(session, 8)])
    head = lake.snapshot()
    record = tmp_path / "full.json"
    record.write_text(json.dumps(_version(session), default=str))
    child = context().Process(target=_die_updating, args=(lake.uri, str(record)))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGKILL

    reopened = tl.open_lake(lake.uri)
    report = reopened.validate()
    assert report.ok, report.problems
    assert report.orphan_versions, "the kill left no orphan versions: nothing was tested"
    assert reopened.snapshot().snapshot_id == head.snapshot_id
    assert _count(reopened, "SELECT count(*) FROM messages") == 8
    # The next commit recovers (restoring the removed files), then updates for real. It is
    # made by the lake object whose key cache predates the kill: it catches up across the
    # orphan version and the restore.
    result = lake.write([_version(session)])
    assert result.updated["trajectories"] == 1
    assert _count(lake, "SELECT count(*) FROM messages") == total
    assert _count(lake, "SELECT count(*) FROM trajectories") == 1
    assert len(_messages_of(lake, tid, at=head.snapshot_id)) == 8
    report = lake.validate()
    assert report.ok and report.orphan_versions == {}


def _two_threads(record: dict[str, Any], main: int, sub: int) -> dict[str, Any]:
    """The first `main` messages, and a subagent thread: `sub` messages from the 9th on."""
    out = _version(record, main)
    rest = copy.deepcopy(record["messages"][8 : 8 + sub])
    for idx, message in enumerate(rest):
        message.update(thread="agent-1", idx=idx, turn=None)
    out["messages"] += rest
    return out


def test_versions_in_several_threads_within_one_commit(
    lake: tl.Lake, session: dict[str, Any]
) -> None:
    whole = _two_threads(session, 6, 4)
    # A part of `whole` in both threads, then `whole`: the one holding every message wins.
    result = lake.write([_two_threads(session, 3, 2), whole])
    assert (result.added["trajectories"], result.duplicates["trajectories"]) == (1, 1)
    rows = lake.sql("SELECT thread, count(*) FROM messages GROUP BY 1 ORDER BY 1").rows()
    assert rows == [("agent-1", 4), ("main", 6)]
    # Two versions that each grew a different thread cannot be told apart in one commit.
    with pytest.raises(tl.errors.InvalidRecord, match="separately"):
        lake.write([_two_threads(session, 3, 1), _two_threads(session, 2, 3)])
