"""Running one parse task in isolation: a file that fails outright is one quarantine row.

`parse_contained` runs `parse_task` under a fresh file watch (`trajlake.ingest._limits`), so the
limits apply to that file alone, and turns a failure to open or normalise it into a quarantine
row; files rejected before parsing (unreadable, unrecognised) get their rows here too.
"""

from __future__ import annotations

from collections.abc import Sequence

from trajlake.errors import InvalidRecord
from trajlake.ingest._adapter import BadRecord
from trajlake.ingest._contain import error_record
from trajlake.ingest._limits import Limits, watching
from trajlake.ingest._parse import (
    ParsedChunk,
    ParseTask,
    Stamp,
    describe,
    parse_task,
    quarantine_row,
)
from trajlake.records import rows_for_table


def parse_contained(task: ParseTask, stamp: Stamp, limits: Limits) -> ParsedChunk:
    """`parse_task` under a fresh file watch; a file that fails outright is one quarantine row."""
    with watching(limits) as watch:
        try:
            chunk = parse_task(task, stamp)
        except InvalidRecord:
            raise  # --strict
        except Exception as e:  # opening or normalising one file failed
            chunk = failed_chunk(task, error_record(e, watch), stamp)
    chunk.problems.extend(f"{task.uri}: {note}" for note in watch.notes)
    return chunk


def failed_chunk(task: ParseTask, bad: BadRecord, stamp: Stamp) -> ParsedChunk:
    """A chunk holding only the quarantine row of a file (InvalidRecord under --strict)."""
    return rejected_chunk([(task, bad)], stamp)


def rejected_chunk(rejects: Sequence[tuple[ParseTask, BadRecord]], stamp: Stamp) -> ParsedChunk:
    """The quarantine rows of files rejected as a whole (InvalidRecord under --strict)."""
    messages = [describe(task.uri, bad, stamp) for task, bad in rejects]
    if stamp.strict and messages:
        raise InvalidRecord(messages[0] + " (without --strict it would be quarantined)")
    rows = [quarantine_row(task, bad, stamp) for task, bad in rejects]
    chunk = ParsedChunk(tables={}, quarantined=len(rows), problems=messages)
    if rows:
        chunk.tables["quarantine"] = rows_for_table("quarantine", rows)
    return chunk
