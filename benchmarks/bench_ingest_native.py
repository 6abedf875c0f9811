"""Native-format ingest throughput per adapter, and memory on a large synthetic file.

Part 1: every file of the shared corpus is assigned to an adapter by content detection; each
adapter's files are ingested into a fresh lake; MB/s and trajectories/s are printed.
Part 2: a synthetic canonical JSONL file is ingested at two sizes; peak RSS (this process and
its parsing workers) is printed for both, and their ratio shows whether memory stays bounded.

    python benchmarks/bench_ingest_native.py [--corpus PATH] [--mb 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import trajlake as tl
from trajlake.ingest import detect, expand_sources
from trajlake.sample import sample_trajectory

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


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


def _child_ingest(path: Path, lake_dir: Path) -> None:
    """Ingest in a fresh process so its peak RSS belongs to this run alone."""
    start = time.perf_counter()
    report = tl.open_lake(lake_dir, create=True).ingest(path)
    seconds = time.perf_counter() - start
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result = {
        "mb": report.bytes_read / 1e6,
        "trajectories": report.added,
        "seconds": seconds,
        "rss_mb": own,
        "worker_rss_mb": workers,
    }
    print(json.dumps(result))


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
    parser.add_argument("--child", nargs=2, metavar=("FILE", "LAKE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child_ingest(Path(args.child[0]), Path(args.child[1]))
        return
    workdir = Path(tempfile.mkdtemp(prefix="trajlake-bench-native-"))
    try:
        if args.corpus.exists():
            bench_adapters(args.corpus, workdir)
        else:
            print(f"corpus not found at {args.corpus}; skipping the per-adapter part")
        bench_large(workdir, args.mb)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        os.sync()


if __name__ == "__main__":
    main()
