"""Native-format ingest throughput per adapter, memory on large files, and ingest against DuckDB.

Part 1: every file of the shared corpus is assigned to an adapter by content detection; each
adapter's files are ingested into a fresh lake; MB/s and trajectories/s are printed.
Part 2: a synthetic canonical JSONL file is ingested at two sizes; peak RSS (this process and
its parsing workers) is printed for both, and their ratio shows whether memory stays bounded.
Part 3: synthetic agent rollouts in the OpenAI-messages layout (≈ 84 MB for the default 12,000)
are ingested end to end (detection, parsing on every core, redaction, normalisation, hashing,
commits) and, in the same run, converted by DuckDB's `read_json` to zstd Parquet; the ratio of
their throughputs is the target (≥ 0.25). A second file `--large-factor` times larger shows
that peak RSS stays flat; one run without redaction shows what redaction costs.

    python benchmarks/bench_ingest_native.py [--corpus PATH] [--mb 1024]
        [--trajectories 12000] [--large-factor 4] [--skip PART ...]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import trajlake as tl
from trajlake.ingest import detect, expand_sources
from trajlake.sample import sample_trajectory

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


# Synthetic rollouts in the OpenAI-messages layout (Part 3): the same seed gives the same bytes.
_CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in the repository and return stdout and stderr.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command."}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "str_replace_editor",
            "description": "View, create or edit a file: view, create, str_replace, insert.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "enum": ["view", "create", "str_replace"]},
                    "path": {"type": "string"},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"},
                },
                "required": ["command", "path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Submit the current diff as the final answer.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
_SYSTEM = (
    "You are an autonomous software engineer working in a checked-out repository. Use the "
    "tools to explore the code, reproduce the issue, edit files and run the tests. Think step "
    "by step, keep edits minimal, and call submit when the tests pass.\n"
) * 2
_WORD_TEXT = (
    "the function returns value when input is none so we should check branch before calling "
    "parse config path module test error raise fix handle empty list index return self args "
    "kwargs dict key missing default cache update request response client server timeout retry"
)
_WORDS = _WORD_TEXT.split()
_REPOS = ["astropy/astropy", "django/django", "psf/requests", "pydata/xarray", "sympy/sympy"]


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def _code(rng: random.Random, lines: int) -> str:
    return "\n".join(
        f"{i + 1:>4}  {'    ' * rng.randint(0, 3)}{rng.choice(_WORDS)} = "
        f"{rng.choice(_WORDS)}({rng.choice(_WORDS)}, {rng.randint(0, 99)})"
        for i in range(lines)
    )


def _turn(rng: random.Random, i: int, t: int) -> list[dict[str, Any]]:
    call_id = f"call_{i}_{t}"
    if rng.random() < 0.5:
        name = "bash"
        args: dict[str, Any] = {"command": f"grep -rn {rng.choice(_WORDS)} src/ | head -20"}
    else:
        name = "str_replace_editor"
        args = {
            "command": "str_replace",
            "path": f"src/{rng.choice(_WORDS)}.py",
            "old_str": _code(rng, 2),
            "new_str": _code(rng, 3),
        }
    output = _code(rng, rng.randint(2, 12))
    if rng.random() < 0.03:
        key = "".join(rng.choice("abcdefghijkLMNOP0123456789") for _ in range(40))
        output += f"\nexport OPENAI_API_KEY=sk-proj-{key}"
    if rng.random() < 0.03:
        output += f"\nAuthor: Dev {t} <dev{t}.{i}@company-mail.io>"
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    call["function"]["arguments"] = json.dumps(args)
    return [
        {"role": "assistant", "content": _text(rng, rng.randint(15, 60)), "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def rollout(i: int, rng: random.Random) -> dict[str, Any]:
    """The `i`-th synthetic rollout."""
    repo = rng.choice(_REPOS)
    issue = _text(rng, rng.randint(60, 160))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _SYSTEM},
        {"role": "user", "content": f"<issue>\n{issue}\n</issue>\nFix the issue in {repo}."},
    ]
    turns = rng.randint(3, 7)
    for t in range(turns):
        messages += _turn(rng, i, t)
    submit = {"id": f"call_{i}_s", "type": "function"}
    submit["function"] = {"name": "submit", "arguments": "{}"}
    messages += [
        {
            "role": "assistant",
            "content": "The tests pass. " + _text(rng, 20),
            "tool_calls": [submit],
        },
        {"role": "tool", "tool_call_id": f"call_{i}_s", "content": "diff --git\n" + _code(rng, 6)},
    ]
    metadata = {
        "instance_id": f"{repo.replace('/', '__')}-{1000 + i % 5000}",
        "rollout_id": f"r{i:07d}",
        "policy_model": "gpt-4o-2024-08-06",
        "verify_status": rng.choice(["resolved", "unresolved"]),
        "reward": rng.choice([0.0, 1.0]),
        "run_id": "bench-run",
        "status": "submitted",
        "n_steps": turns,
    }
    return {"messages": messages, "tools": _CHAT_TOOLS, "metadata": metadata}


def write_chat_jsonl(path: Path, trajectories: int, seed: int = 7) -> int:
    """Write `trajectories` rollouts to `path`; returns the file size in bytes."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(trajectories):
            f.write(json.dumps(rollout(i, rng)) + "\n")
    return path.stat().st_size


def corpus_by_format(corpus: Path) -> dict[str, list[str]]:
    """Corpus files grouped by the adapter content detection picks."""
    groups: dict[str, list[str]] = defaultdict(list)
    for source in expand_sources([str(corpus)]):
        try:
            groups[detect(source).name].append(source.uri)
        except tl.TrajlakeError:
            continue
    return dict(groups)


def bench_adapters(corpus: Path, workdir: Path) -> None:
    """Per adapter: files, MB, trajectories, seconds, MB/s, trajectories/s."""
    print(f"{'format':<16}{'files':>6}{'MB':>8}{'traj':>7}{'s':>7}{'MB/s':>8}{'traj/s':>9}")
    for fmt, files in sorted(corpus_by_format(corpus).items()):
        lake = tl.open_lake(workdir / f"lake-{fmt}", create=True)
        start = time.perf_counter()
        report = lake.ingest(files, format=fmt)
        seconds = time.perf_counter() - start
        mb = report.bytes_read / 1e6
        print(
            f"{fmt:<16}{report.files:>6}{mb:>8.2f}{report.trajectories_read:>7}"
            f"{seconds:>7.2f}{mb / seconds:>8.1f}{report.trajectories_read / seconds:>9.0f}"
        )


def write_synthetic(path: Path, megabytes: int) -> int:
    """A canonical JSONL file of about `megabytes` MB; returns the trajectory count."""
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        while f.tell() < megabytes * 1_000_000:
            f.write(json.dumps(sample_trajectory(count, seed=11)) + "\n")
            count += 1
    return count


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (parsing workers), all threads."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _child_ingest(path: Path, lake_dir: Path, redact: bool = True) -> None:
    """Ingest in a fresh process so its peak RSS belongs to this run alone."""
    # The library is imported before the clock starts, as DuckDB's is in its child.
    import trajlake.ingest._pipeline  # noqa: F401

    open_lake = tl.open_lake
    start = time.perf_counter()
    report = open_lake(lake_dir, create=True).ingest(path, redact=redact)
    seconds = time.perf_counter() - start
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result = {
        "mb": report.bytes_read / 1e6,
        "trajectories": report.added,
        "quarantined": report.quarantined,
        "redactions": report.redactions,
        "seconds": seconds,
        "cpu_s": _cpu_seconds(),
        "rss_mb": own,
        "worker_rss_mb": workers,
    }
    print(json.dumps(result))


def _child_duckdb(path: Path, out: Path) -> None:
    """DuckDB's raw JSON load of the same file, written as zstd Parquet, in a fresh process."""
    # Imported here, not at the top: ingest workers re-import this script, and DuckDB is no
    # part of what they do.
    import duckdb

    start = time.perf_counter()
    con = duckdb.connect()
    con.execute(
        "COPY (SELECT * FROM read_json(?, format = 'newline_delimited')) "
        f"TO '{out}' (FORMAT parquet, COMPRESSION zstd)",
        [str(path)],
    )
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "cpu_s": _cpu_seconds(), "rss_mb": rss}))


def _run_child(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def bench_vs_duckdb(workdir: Path, trajectories: int, large_factor: int) -> None:
    """Ingest of OpenAI-messages rollouts against DuckDB read_json → zstd Parquet, same run."""
    results = []
    sizes = [trajectories] + ([trajectories * large_factor] if large_factor > 1 else [])
    for n in sizes:
        path = workdir / f"chat-{n}.jsonl"
        mb = write_chat_jsonl(path, n) / 1e6
        # DuckDB before and after the ingest: its mean is the reference under the same load.
        duck = [_run_child("--duckdb-child", str(path), str(workdir / f"duck-{n}-a.parquet"))]
        ours = _run_child("--child", str(path), str(workdir / f"lake-chat-{n}"))
        duck.append(_run_child("--duckdb-child", str(path), str(workdir / f"duck-{n}-b.parquet")))
        duck_s = sum(d["seconds"] for d in duck) / len(duck)
        duck_cpu = sum(d["cpu_s"] for d in duck) / len(duck)
        ratio = duck_s / ours["seconds"]
        results.append(ours)
        runs = " / ".join(f"{d['seconds']:.2f}" for d in duck)
        print(
            f"openai-messages {mb:.1f} MB, {n} rollouts: trajlake ingest {ours['seconds']:.2f} s "
            f"= {mb / ours['seconds']:.1f} MB/s ({ours['trajectories']} stored, "
            f"{ours['quarantined']} quarantined, {ours['redactions']} redactions); DuckDB "
            f"read_json→Parquet {duck_s:.2f} s = {mb / duck_s:.1f} MB/s "
            f"({runs} s); ratio {ratio:.3f}; "
            f"peak RSS {ours['rss_mb']:.0f} MB (main), {ours['worker_rss_mb']:.0f} MB "
            f"(largest worker), DuckDB {max(d['rss_mb'] for d in duck):.0f} MB"
        )
        # CPU time (all threads and processes, interpreter start included) barely moves when
        # other work shares the cores: with both sides using every core it tells the ratio
        # the wall clock would show on an idle machine.
        print(
            f"  CPU time: trajlake {ours['cpu_s']:.2f} s, DuckDB {duck_cpu:.2f} s; "
            f"CPU ratio {duck_cpu / ours['cpu_s']:.3f}"
        )
        if n == trajectories:
            first_ratio = ratio
            plain = _run_child(
                "--child", str(path), str(workdir / f"lake-plain-{n}"), "--no-redact"
            )
            print(
                f"  the same without redaction: {plain['seconds']:.2f} s = "
                f"{mb / plain['seconds']:.1f} MB/s (ratio {duck_s / plain['seconds']:.3f}); "
                f"CPU {plain['cpu_s']:.2f} s (CPU ratio {duck_cpu / plain['cpu_s']:.3f})"
            )
        path.unlink()
    if len(results) == 2:
        small, large = results
        workers = large["worker_rss_mb"] / max(small["worker_rss_mb"], 1.0)
        print(
            f"peak RSS for a {large['mb'] / small['mb']:.1f}x larger input: main "
            f"{large['rss_mb'] / small['rss_mb']:.2f}x, largest worker {workers:.2f}x "
            "(bounded memory: close to 1)"
        )
    print(f"RATIO bench_ingest_native ingest/duckdb={first_ratio:.3f} (target >= 0.25)")


def bench_large(workdir: Path, megabytes: int) -> None:
    """Ingest synthetic files of `megabytes`/4 and `megabytes` MB; compare peak RSS."""
    results = []
    for size in (max(1, megabytes // 4), megabytes):
        path = workdir / f"synthetic-{size}.jsonl"
        write_synthetic(path, size)
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(path), str(workdir / f"lake-{size}")],
            check=True,
            capture_output=True,
            text=True,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        results.append(result)
        print(
            f"synthetic {result['mb']:.0f} MB: {result['trajectories']} trajectories in "
            f"{result['seconds']:.1f} s = {result['mb'] / result['seconds']:.1f} MB/s, "
            f"{result['trajectories'] / result['seconds']:.0f} traj/s; peak RSS "
            f"{result['rss_mb']:.0f} MB (parent), {result['worker_rss_mb']:.0f} MB (largest worker)"
        )
        path.unlink()
    small, large = results
    ratio = large["rss_mb"] / small["rss_mb"]
    size_ratio = large["mb"] / small["mb"]
    print(
        f"RATIO bench_ingest_native peak-RSS large/small={ratio:.2f} for a {size_ratio:.1f}x "
        f"larger input (bounded memory: close to 1)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--mb", type=int, default=1024, help="size of the large synthetic file")
    parser.add_argument(
        "--trajectories", type=int, default=12000, help="rollouts in the DuckDB comparison file"
    )
    parser.add_argument(
        "--large-factor", type=int, default=4, help="size of the second comparison file (x)"
    )
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["corpus", "canonical", "duckdb"],
        help="parts not to run",
    )  # fmt: skip
    parser.add_argument("--child", nargs=2, metavar=("FILE", "LAKE"), help=argparse.SUPPRESS)
    parser.add_argument("--no-redact", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--duckdb-child", nargs=2, metavar=("FILE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child_ingest(Path(args.child[0]), Path(args.child[1]), redact=not args.no_redact)
        return
    if args.duckdb_child:
        _child_duckdb(Path(args.duckdb_child[0]), Path(args.duckdb_child[1]))
        return
    workdir = Path(tempfile.mkdtemp(prefix="trajlake-bench-native-"))
    try:
        if "corpus" in args.skip:
            pass
        elif args.corpus.exists():
            bench_adapters(args.corpus, workdir)
        else:
            print(f"corpus not found at {args.corpus}; skipping the per-adapter part")
        if "canonical" not in args.skip:
            bench_large(workdir, args.mb)
        if "duckdb" not in args.skip:
            bench_vs_duckdb(workdir, args.trajectories, args.large_factor)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        os.sync()


if __name__ == "__main__":
    main()
