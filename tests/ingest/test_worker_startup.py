"""What a parsing worker pays before its first task: the modules of one format, and a garbage
collector that leaves the records it holds alone."""

from __future__ import annotations

import gc
import multiprocessing
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

from trajlake.ingest._registry import adapters, get_adapter
from trajlake.ingest._worker import start_worker


def _collector_state() -> tuple[tuple[int, int, int], int, bool]:
    return gc.get_threshold(), gc.get_freeze_count(), "trajlake.ingest._parse" in sys.modules


def test_worker_collector_runs_rarely_with_the_parsing_modules_frozen() -> None:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=start_worker) as pool:
        threshold, frozen, parse_loaded = pool.submit(_collector_state).result(timeout=120)
    assert threshold == (50_000, 20, 100)
    assert parse_loaded and frozen > 10_000


def test_one_format_imports_only_its_adapter() -> None:
    script = (
        "import sys\n"
        "from trajlake.ingest._registry import get_adapter\n"
        "print(get_adapter('openai-messages').name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('trajlake.ingest.') "
        "and not m.startswith('trajlake.ingest._')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert out == ["openai-messages", "['trajlake.ingest.openai_messages']"]


def test_the_registry_hands_out_one_instance_per_format() -> None:
    every = adapters()
    assert all(get_adapter(name) is adapter for name, adapter in every.items())
