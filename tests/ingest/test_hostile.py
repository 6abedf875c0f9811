"""Hostile and broken inputs: each file costs at most itself, never the batch.

Every fixture is generated here from real files in `tests/data` (licences beside them): damaged
compressed files, bombs small on disk, deep nesting, byte-order marks, damaged first lines,
non-finite numbers, corrupt `.eval` zips, unreadable paths. Each test asserts the quarantine
row (file and reason), the good records kept, and, for the bombs, bounded memory and time.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import re
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
import zstandard
from click.testing import CliRunner

import trajlake as tl
from trajlake.cli.main import cli
from trajlake.errors import InvalidRecord
from trajlake.ingest import IngestOptions, ingest

DATA = Path(__file__).resolve().parents[1] / "data"
ROLLOUTS = DATA / "responses/resources_servers/example_multi_step/data/example_rollouts.jsonl"
"""Five NeMo Gym rollouts, one per line (Apache-2.0, tests/data/responses/LICENSE)."""
MINI = DATA / "mini_swe_agent/github_issue.traj.json"
SWE = DATA / "swe_agent/swe-agent__test-repo-i1.traj"
EVAL = DATA / "inspect_ai/log_streaming.eval"
EVAL_SAMPLES = 4
GiB = 1 << 30


def _lines() -> list[bytes]:
    return ROLLOUTS.read_bytes().splitlines(keepends=True)


def _quarantine(lake: tl.Lake) -> list[dict[str, Any]]:
    query = "SELECT source_uri, line, error FROM quarantine ORDER BY source_uri, line"
    return lake.sql(query).to_arrow().to_pylist()


def _count(lake: tl.Lake) -> int:
    return int(lake.sql("SELECT count(*) AS n FROM trajectories").to_arrow()["n"][0].as_py())


def _one_row(lake: tl.Lake, path: Path) -> dict[str, Any]:
    rows = [r for r in _quarantine(lake) if r["source_uri"] == str(path)]
    assert len(rows) == 1, rows
    return rows[0]


def _truncated(compress: Any, data: bytes, min_lines: int) -> bytes:
    """The compressed data cut where at least `min_lines` whole lines still decompress."""
    full = compress(data)
    for cut in range(len(full) // 2, len(full), max(1, len(full) // 200)):
        prefix = full[:cut]
        try:
            out = _partial(prefix)
        except Exception:
            continue
        if out.count(b"\n") >= min_lines and len(out) < len(data):
            return prefix
    raise AssertionError("no cut keeps enough lines")


def _partial(prefix: bytes) -> bytes:
    """What a streaming decompressor yields from a truncated gzip/zstd/bz2/xz prefix."""
    if prefix[:2] == b"\x1f\x8b":
        return zlib.decompressobj(31).decompress(prefix)
    if prefix[:4] == b"\x28\xb5\x2f\xfd":
        return zstandard.ZstdDecompressor().decompressobj().decompress(prefix)
    if prefix[:3] == b"BZh":
        return bz2.BZ2Decompressor().decompress(prefix)
    return lzma.LZMADecompressor().decompress(prefix)


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3, write_content_size=False).compress(data)


# --- damaged compressed files: good records before the damage are kept -----------------------


@pytest.mark.parametrize(
    ("suffix", "compress"),
    [
        (".gz", gzip.compress),
        (".zst", _zstd),
        (".bz2", lambda data: bz2.compress(data, 1)),  # 100 kB blocks: partial output
        (".xz", lzma.compress),
    ],
)
def test_truncated_compressed_file_keeps_records_before_the_damage(
    lake: tl.Lake, tmp_path: Path, suffix: str, compress: Any
) -> None:
    data = b"".join(_lines() * 8)  # 40 rollouts
    path = tmp_path / f"rollouts.jsonl{suffix}"
    path.write_bytes(_truncated(compress, data, min_lines=10))
    report = lake.ingest(path)
    assert report.trajectories_read >= 10
    errors = [r["error"] for r in _quarantine(lake)]
    damage = [e for e in errors if "ends early" in e or "damaged" in e or "truncated" in e]
    assert damage, errors
    assert any("were kept" in e for e in errors) or suffix == ".zst", errors


def test_fake_gzip_is_one_row_naming_the_file(lake: tl.Lake, tmp_path: Path) -> None:
    fake = tmp_path / "fake.jsonl.gz"
    fake.write_bytes(ROLLOUTS.read_bytes())  # plain JSON under a .gz name
    good = tmp_path / "good.jsonl"
    good.write_bytes(ROLLOUTS.read_bytes())
    report = lake.ingest(tmp_path)
    assert report.added == 5
    row = _one_row(lake, fake)
    assert "Not a gzipped file" in row["error"]
    assert any(p.startswith(str(fake)) for p in report.problems)


def test_fake_zstd_is_one_row(lake: tl.Lake, tmp_path: Path) -> None:
    fake = tmp_path / "fake.jsonl.zst"
    fake.write_bytes(b"\x28\xb5\x2f\xfd" + os.urandom(2000))
    (tmp_path / "good.jsonl").write_bytes(ROLLOUTS.read_bytes())
    report = lake.ingest(tmp_path)
    assert report.added == 5
    assert "damaged compressed data" in _one_row(lake, fake)["error"]


def test_gzip_with_garbage_in_the_middle(lake: tl.Lake, tmp_path: Path) -> None:
    data = gzip.compress(b"".join(_lines() * 8))
    middle = len(data) // 2
    path = tmp_path / "corrupt.jsonl.gz"
    path.write_bytes(data[:middle] + bytes(64) + data[middle + 64 :])
    report = lake.ingest([path, ROLLOUTS])
    assert report.added == 5  # the plain file; the damaged one's rollouts are its duplicates
    assert any(str(path) in p for p in report.problems)


def test_empty_gzip_is_skipped_as_empty(lake: tl.Lake, tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl.gz").write_bytes(gzip.compress(b""))
    (tmp_path / "good.jsonl").write_bytes(ROLLOUTS.read_bytes())
    report = lake.ingest(tmp_path)
    assert report.skipped_by_reason == {"empty files": [str(tmp_path / "empty.jsonl.gz")]}


# --- bombs: memory and time bounded -----------------------------------------------------------


_MEASURED_CLI = """
import atexit, sys
# The child's own peak, from its memory map's high-water mark (VmHWM, KiB): ru_maxrss would
# start from the forking test process's peak, which a long test run makes large.
def _peak():
    with open("/proc/self/status") as f:
        hwm = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    print("peak-rss-kib", hwm, file=sys.stderr)
atexit.register(_peak)
from trajlake.cli.main import main
sys.argv[0] = "trajlake"
main()
"""


def _ingest_in_subprocess(tmp_path: Path, path: Path) -> tuple[dict[str, Any], int, float]:
    """Ingest in a child process: its report, its own peak RSS (bytes) and wall time."""
    start = time.perf_counter()
    args = [sys.executable, "-c", _MEASURED_CLI, "ingest", str(path), "--output", "json"]
    done = subprocess.run(
        [*args, "--lake", str(tmp_path / "lake"), "--create"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    assert "Aborted" not in done.stderr + done.stdout
    peaks = [
        line.split()[1] for line in done.stderr.splitlines() if line.startswith("peak-rss-kib")
    ]
    assert peaks, done.stderr
    return json.loads(done.stdout), int(peaks[-1]) * 1024, seconds


def test_gzip_bomb_stops_at_the_decompressed_limit(tmp_path: Path) -> None:
    # 4 MiB on disk, 4 GiB decompressed: a valid rollout, then spaces without a newline.
    member = gzip.compress(b" " * (16 << 20), 9)
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(_lines()[0]) + member * 256)
    assert bomb.stat().st_size < 5 << 20
    report, peak, seconds = _ingest_in_subprocess(tmp_path, bomb)
    assert report["added"] == 1
    assert any("decompresses to more than" in p for p in report["problems"])
    assert any("longer than max_line_bytes" in p for p in report["problems"])
    assert peak < GiB and seconds < 60


def test_zstd_bomb_stops_at_the_floor(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.jsonl.zst"
    out = io.BytesIO()
    with zstandard.ZstdCompressor(level=1).stream_writer(out, closefd=False) as writer:
        writer.write(_lines()[0])
        for _ in range(64):  # 1 GiB of spaces, ~40 KiB on disk
            writer.write(b" " * (16 << 20))
    bomb.write_bytes(out.getvalue())
    report, peak, seconds = _ingest_in_subprocess(tmp_path, bomb)
    assert report["added"] == 1
    assert any("decompresses to more than 67108864 bytes" in p for p in report["problems"])
    assert peak < GiB and seconds < 60


def test_many_tiny_bad_lines_are_counted_not_stored(tmp_path: Path) -> None:
    # 490 KiB of gzip, 167 M lines of `{}` after one good rollout.
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [compressor.compress(_lines()[0])]
    block = b"{}\n" * (1 << 22)
    parts += [compressor.compress(block) for _ in range(40)]
    path = tmp_path / "tiny.jsonl.gz"
    path.write_bytes(b"".join([*parts, compressor.flush()]))
    report, peak, seconds = _ingest_in_subprocess(tmp_path, path)
    assert report["added"] == 1
    assert report["quarantined"] == 1001  # the first 1,000 bad lines and one summary row
    lake = tl.open_lake(tmp_path / "lake")
    summary = [r for r in _quarantine(lake) if "counted, not stored" in r["error"]]
    assert len(summary) == 1 and "reading stopped at line" in summary[0]["error"]
    assert peak < GiB and seconds < 30


def test_gzip_of_zeros_is_skipped_at_detection_quickly(lake: tl.Lake, tmp_path: Path) -> None:
    member = gzip.compress(bytes(16 << 20), 9)
    (tmp_path / "zeros.jsonl.gz").write_bytes(member * 64)  # 1 GiB of NUL bytes
    (tmp_path / "good.jsonl").write_bytes(ROLLOUTS.read_bytes())
    start = time.perf_counter()
    report = lake.ingest(tmp_path)
    assert time.perf_counter() - start < 20
    assert report.added == 5
    assert report.skipped_by_reason == {"binary files": [str(tmp_path / "zeros.jsonl.gz")]}


# --- limits set by the caller -----------------------------------------------------------------


def test_overlong_line_is_quarantined_without_the_others(lake: tl.Lake, tmp_path: Path) -> None:
    lines = _lines()
    longest = max(len(line) for line in lines)
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b"".join(lines))
    options = IngestOptions(max_line_bytes=longest - 2)
    report = ingest(lake, [str(path)], options=options)
    assert report.added == 4
    row = _one_row(lake, path)
    assert f"longer than max_line_bytes ({longest - 2})" in row["error"]


def test_bad_records_beyond_the_cap_are_one_summary_row(lake: tl.Lake, tmp_path: Path) -> None:
    lines = _lines()
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"".join([*lines, b"{broken\n" * 30, *lines]))
    report = ingest(lake, [str(path)], options=IngestOptions(max_bad_records=10))
    assert report.trajectories_read == 10  # both copies read: the file is mostly good
    rows = _quarantine(lake)
    assert len(rows) == 11 and report.quarantined == 11
    assert "20 more bad records after the first 10" in rows[-1]["error"]
    assert "reading stopped" not in rows[-1]["error"]


def test_mostly_bad_file_stops_being_read(lake: tl.Lake, tmp_path: Path) -> None:
    path = tmp_path / "mostly_bad.jsonl"
    path.write_bytes(b"".join([_lines()[0], b"[]\n" * 5000, *_lines()[1:]]))
    report = ingest(lake, [str(path)], options=IngestOptions(max_bad_records=100))
    assert report.trajectories_read == 1  # the rollouts after the bad run are not reached
    summary = _quarantine(lake)[-1]["error"]
    assert "reading stopped at line" in summary and "101 of 102 records were bad" in summary


# --- records that used to break a file or the run ---------------------------------------------


def test_deeply_nested_line_costs_only_itself(lake: tl.Lake, tmp_path: Path) -> None:
    lines = _lines()
    path = tmp_path / "deep.jsonl"
    path.write_bytes(lines[0] + b"[" * 100_000 + b"\n" + b"".join(lines[1:]))
    report = lake.ingest(path)
    assert report.added == 5
    row = _one_row(lake, path)
    assert row["line"] == 2 and "nested too deeply" in row["error"]


def test_deeply_nested_document_is_one_row(lake: tl.Lake, tmp_path: Path) -> None:
    path = tmp_path / "deep.traj.json"
    path.write_bytes(b'[{"role": "system", "content": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]")
    report = lake.ingest([path, ROLLOUTS])
    assert report.added == 5
    assert "nested too deeply" in _one_row(lake, path)["error"]


def test_bom_before_jsonl_keeps_the_first_record(lake: tl.Lake, tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + ROLLOUTS.read_bytes())
    report = lake.ingest(path)
    assert report.added == 5 and report.quarantined == 0


def test_bom_before_a_json_document(lake: tl.Lake, tmp_path: Path) -> None:
    path = tmp_path / "bom.traj.json"
    path.write_bytes(b"\xef\xbb\xbf" + MINI.read_bytes())
    report = lake.ingest(path)
    assert report.added == 1 and report.formats == {"mini-swe-agent": 1}


def test_bom_before_a_gzip_jsonl(lake: tl.Lake, tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl.gz"
    path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + ROLLOUTS.read_bytes()))
    assert lake.ingest(path).added == 5


def test_damaged_first_line_is_quarantined_not_the_file_skipped(
    lake: tl.Lake, tmp_path: Path
) -> None:
    lines = _lines()
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(lines[0][:200] + b"\n" + b"".join(lines[1:]))
    report = lake.ingest([path, tmp_path])
    assert report.added == 4 and report.files_skipped == []
    row = _one_row(lake, path)
    assert row["line"] == 1 and "malformed JSON" in row["error"]


def test_invalid_utf8_first_line(lake: tl.Lake, tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b"\xff\xfe caf\xe9\n" + ROLLOUTS.read_bytes())
    report = lake.ingest(path)
    assert report.added == 5
    assert "invalid UTF-8" in _one_row(lake, path)["error"]


def test_invalid_utf8_in_the_middle(lake: tl.Lake, tmp_path: Path) -> None:
    lines = _lines()
    path = tmp_path / "mid.jsonl"
    path.write_bytes(b"".join([*lines[:2], lines[2].replace(b"You", b"Y\xc3\x28u", 1), *lines[3:]]))
    report = lake.ingest(path)
    assert report.added == 4
    row = _one_row(lake, path)
    assert row["line"] == 3 and "invalid UTF-8" in row["error"]


def test_truncated_plain_jsonl_keeps_the_complete_lines(lake: tl.Lake, tmp_path: Path) -> None:
    data = ROLLOUTS.read_bytes()
    path = tmp_path / "cut.jsonl"
    path.write_bytes(data[: len(data) - 500])
    report = lake.ingest(path)
    assert report.added == 4
    assert "(truncated file?)" in _one_row(lake, path)["error"]


def test_truncated_json_document_is_one_row(lake: tl.Lake, tmp_path: Path) -> None:
    data = SWE.read_bytes()
    path = tmp_path / "cut.traj"
    path.write_bytes(data[: len(data) // 2])
    report = lake.ingest([path, ROLLOUTS])
    assert report.added == 5
    assert _one_row(lake, path)["error"]


def test_non_finite_numbers_are_stored_as_null_and_reported(lake: tl.Lake, tmp_path: Path) -> None:
    lines = _lines()
    second = re.sub(rb'"accuracy": (true|false)', b'"accuracy": Infinity', lines[1], count=1)
    third = re.sub(rb'"total_tokens": \d+', b'"total_tokens": NaN', lines[2], count=1)
    path = tmp_path / "nan.jsonl"
    path.write_bytes(b"".join([lines[0], second, third, *lines[3:]]))
    report = lake.ingest(path)
    assert report.added == 5 and report.quarantined == 0
    notes = [p for p in report.problems if "non-finite" in p]
    assert len(notes) == 2 and "line 2: 1 non-finite number(s)" in notes[0]
    out = tmp_path / "out.jsonl"
    lake.export_jsonl(str(out))

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in exported JSON")

    exported = [json.loads(line, parse_constant=refuse) for line in out.read_text().splitlines()]
    cleaned = [r["attrs"]["trajlake_cleaned"] for r in exported if "trajlake_cleaned" in r["attrs"]]
    assert sorted(c["count"] for c in cleaned) == [1, 1]


def test_non_finite_number_in_a_json_document(lake: tl.Lake, tmp_path: Path) -> None:
    data = json.loads(SWE.read_text())
    data["info"]["model_stats"] = {"instance_cost": float("nan"), "tokens_sent": float("inf")}
    path = tmp_path / "nan.traj"
    path.write_text(json.dumps(data))  # json.dumps writes NaN and Infinity
    report = lake.ingest(path)
    assert report.added == 1
    assert any("non-finite" in p for p in report.problems)


# --- corrupt .eval zips ------------------------------------------------------------------------


def test_truncated_eval_zip_is_one_row(lake: tl.Lake, tmp_path: Path) -> None:
    data = EVAL.read_bytes()
    path = tmp_path / "cut.eval"
    path.write_bytes(data[: len(data) // 2])
    report = lake.ingest([path, ROLLOUTS])
    assert report.added == 5
    assert "not a zip file" in _one_row(lake, path)["error"]


def test_eval_zip_with_a_damaged_member_keeps_the_others(lake: tl.Lake, tmp_path: Path) -> None:
    data = bytearray(EVAL.read_bytes())
    start = data.index(b"samples/2_epoch_1.json") + 40  # inside that member's deflate data
    data[start : start + 200] = os.urandom(200)
    path = tmp_path / "damaged.eval"
    path.write_bytes(bytes(data))
    report = lake.ingest([path, ROLLOUTS])
    assert 5 <= report.added < 5 + EVAL_SAMPLES  # the samples read before the damage
    error = _one_row(lake, path)["error"]
    assert "while decompressing" in error and "read before it" in error


def test_eval_that_is_not_a_zip(lake: tl.Lake, tmp_path: Path) -> None:
    path = tmp_path / "fake.eval"
    path.write_bytes(b"PK\x03\x04" + os.urandom(4000))
    report = lake.ingest([path, ROLLOUTS])
    assert report.added == 5
    assert "not a zip file" in _one_row(lake, path)["error"]


# --- unreadable paths --------------------------------------------------------------------------


def test_broken_symlink_is_one_row(lake: tl.Lake, tmp_path: Path) -> None:
    link = tmp_path / "gone.jsonl"
    link.symlink_to(tmp_path / "nowhere.jsonl")
    (tmp_path / "good.jsonl").write_bytes(ROLLOUTS.read_bytes())
    report = lake.ingest(tmp_path)
    assert report.added == 5
    assert "broken symbolic link" in _one_row(lake, link)["error"]


def test_fifo_is_never_opened(lake: tl.Lake, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)  # opening it would block until a writer came
    (tmp_path / "good.jsonl").write_bytes(ROLLOUTS.read_bytes())
    report = lake.ingest(tmp_path)
    assert report.added == 5
    assert "not a regular file (FIFO)" in _one_row(lake, fifo)["error"]


def test_fifo_named_alone_is_a_row_not_a_hang(lake: tl.Lake, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    report = lake.ingest(fifo)
    assert report.quarantined == 1 and report.added == 0


def test_symlink_loop_is_one_row(lake: tl.Lake, tmp_path: Path) -> None:
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    report = lake.ingest([loop, ROLLOUTS])
    assert report.added == 5
    assert "symbolic link" in _one_row(lake, loop)["error"]


def test_strict_turns_a_damaged_file_into_an_error(lake: tl.Lake, tmp_path: Path) -> None:
    fake = tmp_path / "fake.jsonl.gz"
    fake.write_bytes(ROLLOUTS.read_bytes())
    with pytest.raises(InvalidRecord, match=r"fake\.jsonl\.gz"):
        lake.ingest([fake, ROLLOUTS], strict=True)


# --- unrecognised structure: quarantined, not skipped -----------------------------------------


def test_trajectory_like_json_of_no_format_is_quarantined(lake: tl.Lake, tmp_path: Path) -> None:
    odd = tmp_path / "odd.json"
    steps = [{"thought": "look", "command": "ls"}]
    odd.write_text(json.dumps({"run": "x", "steps": steps}))
    report = lake.ingest([odd, ROLLOUTS])
    assert report.added == 5
    error = _one_row(lake, odd)["error"]
    assert error.startswith("unrecognised structure") and "{run, steps}" in error


# --- a whole folder, through the CLI ----------------------------------------------------------


def _mixed_folder(root: Path) -> Path:
    folder = root / "runs"
    (folder / "docs").mkdir(parents=True)
    lines = _lines()
    (folder / "good.jsonl").write_bytes(ROLLOUTS.read_bytes())
    (folder / "mini.traj.json").write_bytes(MINI.read_bytes())
    data = gzip.compress(b"".join(lines * 4))
    (folder / "cut.jsonl.gz").write_bytes(data[: len(data) * 9 // 10])
    (folder / "fake.jsonl.gz").write_bytes(b"not gzip at all")
    (folder / "cut.eval").write_bytes(EVAL.read_bytes()[:3000])
    (folder / "deep.jsonl").write_bytes(b"[" * 100_000 + b"\n" + lines[0])
    (folder / "gone.jsonl").symlink_to(folder / "nowhere")
    (folder / "docs" / "README.md").write_text("# runs\n")
    (folder / "docs" / "fix.patch").write_text("--- a/x\n+++ b/x\n")
    (folder / "config.json").write_text('{"model": "m", "temperature": 0}')
    return folder


def test_cli_ingest_of_a_mixed_folder_exits_0(tmp_path: Path) -> None:
    folder = _mixed_folder(tmp_path)
    args = ["ingest", str(folder), "--lake", str(tmp_path / "lake"), "--create"]
    result = CliRunner().invoke(cli, [*args, "--output", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # cut.eval opens like an Inspect log: detected, then quarantined when it fails to read
    assert report["formats"] == {"responses": 3, "mini-swe-agent": 1, "inspect": 1}
    assert report["added"] == 5 + 1
    problems = "\n".join(report["problems"])
    for name in ("cut.jsonl.gz", "fake.jsonl.gz", "cut.eval", "deep.jsonl", "gone.jsonl"):
        assert str(folder / name) in problems, name
    reasons = report["skipped_by_reason"]
    assert {r: v["count"] for r, v in reasons.items()} == {
        "README/markdown/text": 1,
        "patches": 1,
        "JSON without trajectory keys": 1,
    }
    text = CliRunner().invoke(cli, args)  # the same again as text: nothing new, one skip line
    assert text.exit_code == 0
    skip_lines = [line for line in text.output.splitlines() if line.startswith("skipped")]
    assert len(skip_lines) == 1 and "1 patches (e.g. fix.patch)" in skip_lines[0]


def test_real_process_never_prints_aborted(tmp_path: Path) -> None:
    # The bomb tests run the CLI without --verbose; this one with it.
    folder = _mixed_folder(tmp_path)
    lake = tmp_path / "lake"
    args = ["--verbose", "ingest", str(folder), "--lake", str(lake), "--create"]
    done = subprocess.run(
        [sys.executable, "-m", "trajlake", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Aborted" not in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert "6 added" in done.stdout and "quarantined" in done.stdout


def test_cli_strict_names_the_file_in_one_line(tmp_path: Path) -> None:
    fake = tmp_path / "fake.jsonl.gz"
    fake.write_bytes(b"\x1f\x8b" + os.urandom(100))
    args = ["ingest", str(fake), str(ROLLOUTS), "--strict", "--lake", str(tmp_path / "l")]
    result = CliRunner().invoke(cli, [*args, "--create"])
    assert result.exit_code == 1
    assert "Aborted" not in result.output
    assert result.output.startswith("error: ") and "fake.jsonl.gz" in result.output


def test_workers_contain_broken_files_too(lake: tl.Lake, tmp_path: Path) -> None:
    folder = _mixed_folder(tmp_path)
    options = IngestOptions(workers=2, parallel_min_bytes=0)
    report = ingest(lake, [str(folder)], options=options)
    assert report.added == 6
    quarantined = {r["source_uri"] for r in _quarantine(lake)}
    for name in ("cut.jsonl.gz", "fake.jsonl.gz", "cut.eval", "deep.jsonl", "gone.jsonl"):
        assert str(folder / name) in quarantined, name


def test_cli_turns_eof_into_one_line_not_aborted() -> None:
    import click

    from trajlake.cli.main import TrajlakeGroup

    @click.group(cls=TrajlakeGroup)
    @click.option("--verbose", is_flag=True)
    def group(verbose: bool) -> None:
        pass

    @group.command()
    def read() -> None:
        gzip.decompress(gzip.compress(b"x" * 1000)[:-12])  # raises EOFError

    result = CliRunner().invoke(group, ["read"])
    assert result.exit_code == 1 and "Aborted" not in result.output
    assert result.output.startswith("error: input ended early (")
