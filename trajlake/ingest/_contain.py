"""Containing hostile files: whatever one file does, it costs at most itself.

`contain` wraps an adapter's records: bad records beyond the per-file cap are counted instead
of stored (and a file that is mostly bad stops being read), errors the adapter did not expect
end that file with one quarantine row, and non-finite numbers are stored as null with a note.
"""

from __future__ import annotations

import logging
import math
import zipfile
import zlib
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from trajlake.ingest._adapter import BadRecord
from trajlake.ingest._limits import FileWatch, current_watch

log = logging.getLogger(__name__)

_DATA_ERRORS = (OSError, EOFError, ValueError, RecursionError, zipfile.BadZipFile, zlib.error)
"""Errors hostile content raises in an adapter; others are logged with their traceback."""
_CLEANED_KEY = "trajlake_cleaned"
_PATHS_KEPT = 20


def contain(items: Iterator[Any]) -> Iterator[Any]:
    """The adapter's records, bounded and cleaned; file-level problems as BadRecords at the end."""
    watch = current_watch()
    try:
        for item in items:
            if isinstance(item, BadRecord):
                if _count_bad(watch, item):
                    yield item
                elif _hopeless(watch):
                    watch.stopped_at_line = item.line
                    break
                continue
            watch.good += 1
            # The full walk of a record is paid only when the parser counted a NaN/Infinity
            # or a cheap look at its top-level numbers finds one.
            if watch.non_finite_parsed or _non_finite_scalars(item.record):
                _clean_record(item, watch)
            yield item
    except Exception as e:  # one hostile file must never end the batch
        yield error_record(e, watch)
    finally:
        # Closing the adapter's generator runs its own clean-up (open members, companion
        # streams) also when reading stopped early.
        close = getattr(items, "close", None)
        if close is not None:
            close()
    yield from _file_records(watch)


def _count_bad(watch: FileWatch, item: BadRecord) -> bool:
    """Count a bad record; whether it is stored one by one (within the per-file cap)."""
    watch.bad += 1
    if watch.bad <= watch.limits.max_bad_records:
        return True
    watch.overflow += 1
    return False


def _hopeless(watch: FileWatch) -> bool:
    """Past the cap and nearly all bad: the file holds no records of this format."""
    total = watch.bad + watch.good
    return watch.bad >= watch.limits.give_up_bad_fraction * total


def error_record(error: Exception, watch: FileWatch) -> BadRecord:
    if not isinstance(error, _DATA_ERRORS):
        log.warning("unexpected error reading a file", exc_info=error)
    kept = _kept(watch.good)
    reason = "nested too deeply to parse" if isinstance(error, RecursionError) else str(error)
    return BadRecord(f"file could not be read to its end: {type(error).__name__}: {reason}{kept}")


def _kept(good: int) -> str:
    if not good:
        return ""
    if good == 1:
        return "; the trajectory read before it was kept"
    return f"; the {good} trajectories read before it were kept"


def _file_records(watch: FileWatch) -> Iterator[BadRecord]:
    """The file-level rows: data that ended early, and bad records beyond the cap."""
    if watch.damage is not None:
        yield BadRecord(watch.damage + _kept(watch.good), watch.damage_line, watch.damage_offset)
    if watch.overflow:
        cap = watch.limits.max_bad_records
        error = f"{watch.overflow} more bad records after the first {cap} were counted, not stored"
        if watch.stopped_at_line is not None:
            error += (
                f"; reading stopped at line {watch.stopped_at_line}: {watch.bad} of "
                f"{watch.bad + watch.good} records were bad, so the rest is not of this format"
            )
        yield BadRecord(error + " (max_bad_records)", watch.stopped_at_line)


def _non_finite_scalars(record: Any) -> bool:
    """A cheap look at the top-level numbers, for values no JSON parse of ours produced."""
    if isinstance(record, dict):
        reward, cost, rewards = record.get("reward"), record.get("cost_usd"), record.get("rewards")
    else:
        reward, cost, rewards = record.reward, record.cost_usd, record.rewards
    values = [reward, cost, *(rewards.values() if isinstance(rewards, dict) else ())]
    return any(isinstance(v, float) and not math.isfinite(v) for v in values)


def _clean_record(item: Any, watch: FileWatch) -> None:
    """NaN/Infinity → null (they are not JSON), recorded in the trajectory's attrs.

    The JSON parser already reads them as null (`_adapter.loads`, counted on the watch);
    values that reached the record as floats some other way are found and named here.
    """
    found: list[str] = []
    _clean(item.record, "", found)
    parsed, watch.non_finite_parsed = watch.non_finite_parsed, 0
    count = len(found) + parsed
    if not count:
        return
    record = item.record  # a model, or a plain row dict on the fast path
    cleaned = {"non_finite_to_null": found[:_PATHS_KEPT], "count": count}
    if isinstance(record, dict):
        record["attrs"] = {**(record.get("attrs") or {}), _CLEANED_KEY: cleaned}
    else:
        record.attrs = {**(record.attrs or {}), _CLEANED_KEY: cleaned}
    where = f"line {item.line}: " if item.line is not None else ""
    shown = ", ".join(found[:3]) + (", …" if len(found) > 3 else "")
    fields = f" ({shown})" if shown else ""
    watch.notes.append(f"{where}{count} non-finite number(s) (NaN/Infinity) stored as null{fields}")


def _clean(value: Any, path: str, found: list[str]) -> Any:
    """`value` with non-finite floats replaced by None (in place for containers)."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        found.append(path or "value")
        return None
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            old = getattr(value, name)
            new = _clean(old, f"{path}.{name}" if path else name, found)
            if new is not old:
                setattr(value, name, new)
    elif isinstance(value, dict):
        for key, old in value.items():
            new = _clean(old, f"{path}.{key}", found)
            if new is not old:
                value[key] = new
    elif isinstance(value, list):
        for index, old in enumerate(value):
            new = _clean(old, f"{path}[{index}]", found)
            if new is not old:
                value[index] = new
    return value
