"""`trajlake view --bundle DIR`: a selection of the lake as static files that open from disk.

Pages opened from file:// cannot fetch(), so every payload is a classic script that registers
itself: `data/bundle.js` sets `window.TRAJLAKE_BUNDLE` (meta, lake page, every runs row of the
selection, its tasks, and a map of the other payloads' files), and each `data/<kind>/<n>.js`
calls `window.trajlakeBundleLoad(key, payload)`. Payloads come from `ViewData.answer`, the
same code that answers the server's requests, so they are identical to the server's JSON.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trajlake.lake import LakeStore
from trajlake.view._credit import runs_with_rows
from trajlake.view._service import ViewData

PLACEHOLDER = "<!-- trajlake:bundle-data -->"
"""The line of index.html the bundle's data script replaces."""
DATA_SCRIPT = '<script src="data/bundle.js"></script>'
DEFAULT_LIMIT = 1000
"""Trajectories a bundle holds at most unless told otherwise (each is one file)."""


@dataclass(frozen=True)
class BundleReport:
    """What a bundle holds."""

    directory: str
    snapshot: int
    trajectories: int
    credit_files: int
    candidate_files: int
    files: int
    bytes: int
    truncated: bool = False
    keys: list[str] = field(default_factory=list, repr=False)


def _script(call: str, *args: Any) -> str:
    # ensure_ascii keeps U+2028/2029 and odd bytes out of the script text.
    return f"{call}({', '.join(json.dumps(a, ensure_ascii=True) for a in args)});\n"


def write_bundle(
    store: LakeStore,
    directory: str | Path,
    *,
    where: str | None = None,
    at: str | None = None,
    limit: int | None = DEFAULT_LIMIT,
    static_dir: Path | None = None,
) -> BundleReport:
    """Write the trajectories matching `where` at `at` (at most `limit`) as a static bundle.

    Args:
        store: The lake.
        directory: Folder to write (created; an existing `index.html`, `static/` and `data/`
            in it are replaced).
        where: SQL predicate over `trajectories` (as `--where` everywhere).
        at: Snapshot or tag (default: the latest).
        limit: Most trajectories (newest first); None for all.
        static_dir: The page's folder (default: the package's).

    Raises:
        ViewRequestError: A bad `where` or `at`.
        FileNotFoundError: The page's index.html is missing.
        ValueError: index.html lacks the bundle placeholder line.
    """
    from trajlake.view._app import STATIC_DIR

    static = Path(static_dir or STATIC_DIR)
    index = (static / "index.html").read_text(encoding="utf-8")
    if PLACEHOLDER not in index:
        raise ValueError(f"{static / 'index.html'} has no {PLACEHOLDER!r} line")
    out = Path(directory)
    data = ViewData(store, at=at, mode="bundle")
    try:
        return _write(data, out, static, index, where, limit, at)
    finally:
        data.close()


def _write(
    data: ViewData,
    out: Path,
    static: Path,
    index: str,
    where: str | None,
    limit: int | None,
    at: str | None,
) -> BundleReport:
    pin = data.pin(None)
    # Every payload is asked for at the same pinned ref, as the page in the bundle asks.
    base = {"at": at or str(pin.snapshot.snapshot_id)}
    selection = {**base, **({"where": where} if where else {})}
    snapshot = pin.snapshot.snapshot_id
    fetch = None if limit is None else limit + 1
    rows = data.runs_index.all_rows(snapshot, data.filters(selection), fetch)
    truncated = limit is not None and len(rows) > limit
    rows = rows[:limit] if limit is not None else rows
    ids = [r["trajectory_id"] for r in rows]
    tasks = sorted({r["task_id"] for r in rows if r["task_id"] is not None})
    for folder in ("data", "static"):
        shutil.rmtree(out / folder, ignore_errors=True)
    (out / "data").mkdir(parents=True, exist_ok=True)
    shutil.copytree(static, out / "static", ignore=shutil.ignore_patterns("index.html"))
    files: dict[str, str] = {}
    per_folder: dict[str, int] = {}
    written = 0

    def store_payload(folder: str, key: str, payload: dict[str, Any]) -> None:
        nonlocal written
        number = per_folder[folder] = per_folder.get(folder, -1) + 1
        relative = f"data/{folder}/{number}.js"
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_script("window.trajlakeBundleLoad", key, payload), encoding="utf-8")
        files[key] = relative
        written += path.stat().st_size

    for trajectory_id in ids:
        payload = data.answer("trajectory", {**base, "id": trajectory_id})
        store_payload("t", f"trajectory:{trajectory_id}", payload)
    with data.session(pin) as session:
        covered = runs_with_rows(session, ids)
    for run, trajectory_id in covered:
        params = {**base, "id": trajectory_id, "run": run}
        store_payload("c", f"credit:{run}:{trajectory_id}", data.answer("credit", params))
    for task_id in tasks:
        payload = data.answer("candidates", {**base, "task_id": task_id})
        store_payload("k", f"candidates:{task_id}", payload)
    tasks_page = data.answer("tasks", {**selection, "limit": "500"})
    task_rows, offset = list(tasks_page["rows"]), 500
    while offset < tasks_page["total"]:
        more = data.answer("tasks", {**selection, "limit": "500", "offset": str(offset)})
        task_rows += more["rows"]
        offset += 500
    bundle = {
        "meta": data.answer("meta", base),
        "lake": data.answer("lake", base),
        "runs": rows,
        "tasks": task_rows,
        "selection": {"where": where, "limit": limit, "truncated": truncated},
        "files": files,
    }
    bundle_js = out / "data" / "bundle.js"
    bundle_js.write_text(
        "window.TRAJLAKE_BUNDLE = " + json.dumps(bundle, ensure_ascii=True) + ";\n",
        encoding="utf-8",
    )
    (out / "index.html").write_text(index.replace(PLACEHOLDER, DATA_SCRIPT, 1), encoding="utf-8")
    total = written + bundle_js.stat().st_size
    return BundleReport(
        directory=str(out),
        snapshot=pin.snapshot.snapshot_id,
        trajectories=len(ids),
        credit_files=len(covered),
        candidate_files=sum(k.startswith("candidates:") for k in files),
        files=len(files) + 2,
        bytes=total,
        truncated=truncated,
        keys=sorted(files),
    )
