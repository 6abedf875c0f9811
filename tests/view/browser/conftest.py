"""Browser-test fixtures: one headless Chromium per test module, the real viewer server over
real lakes (a quick demo lake with scores, and one ingested from corpus files), and pages that
record every request they make so each test can check that nothing leaves the page's own origin."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import trajlake as tl
from tests.conftest import SHARED_CORPUS
from tests.view.browser._browser import cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(os.environ.get("TRAJLAKE_TEST_ARTIFACTS") or Path(__file__).parent / "artifacts")
VIEWPORT = {"width": 1280, "height": 800}
# One file per harness the viewer must show (small ones, ingested in about 3 s).
CORPUS_FILES = [
    "01_sweagent_traj/tests/test_data/trajectories",
    "02_mini_swe_agent/upstream_test_data",
    "03_openhands/evaluation/benchmarks/multi_swe_bench/examples/output.jsonl",
    "05_coding_cli_sessions/claude_code_jsonl/marot_spotter/test",
    "06_eval_frameworks/inspect_ai_logs/tests/log/test_eval_log/log_tool_call_error.json",
]


@pytest.fixture(scope="session")
def playwright_api() -> Any:
    """The playwright sync API, or a skip that says what is missing (a failure in CI, which
    installs both and sets TRAJLAKE_REQUIRE_BROWSER)."""
    missing = None
    if CHROMIUM is None:
        missing = "no chromium on PATH (Debian: apt-get install chromium)"
    else:
        try:
            import playwright.sync_api as api
        except ImportError:
            missing = "playwright is not installed (pip install playwright)"
    if missing is not None:
        if os.environ.get("TRAJLAKE_REQUIRE_BROWSER"):
            pytest.fail(f"browser tests required but {missing}")
        pytest.skip(missing)
    return api


@pytest.fixture(scope="module")
def browser(playwright_api: Any) -> Iterator[Any]:
    """The system Chromium, headless (no browser download exists offline).

    One per test module, not per session: while the sync API is started it leaves an event
    loop marked running on the main thread, and every later test of the same process that
    calls `asyncio.run()` (the proxy's, the servers') would fail.
    """
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


class RecordingPage:
    """A page plus every URL it requested and every script error it raised."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.requests: list[str] = []
        self.errors: list[str] = []
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.set_default_timeout(20_000)

    def shot(self, name: str) -> Path:
        """Saves a screenshot of the viewport to the artefact folder."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"viewer-{name}.png"
        # A jump to a turn scrolls again once the turns above it are filled in (within 400 ms):
        # the picture is taken after that and a painted frame, so it shows what a reader sees.
        self.page.evaluate(
            "() => new Promise(done => setTimeout(() => requestAnimationFrame(() =>"
            " requestAnimationFrame(done)), 450))"
        )
        self.page.screenshot(path=str(path))
        return path


@pytest.fixture
def new_page(browser: Any) -> Iterator[Any]:
    """Opens recording pages (one context each); closes them after the test."""
    contexts: list[Any] = []

    def open_page() -> RecordingPage:
        context = browser.new_context(viewport=VIEWPORT)
        contexts.append(context)
        return RecordingPage(context.new_page())

    yield open_page
    for context in contexts:
        context.close()


@pytest.fixture(scope="session")
def demo_lake(tmp_path_factory: pytest.TempPathFactory) -> tl.Lake:
    """`trajlake demo --quick` (generations, labels, tags, five credit runs, exports, models),
    then its value model's scores (`trajlake score`), so candidates have ranks."""
    pytest.importorskip("aiohttp", reason="the viewer server needs aiohttp (extra `view`)")
    path = tmp_path_factory.mktemp("view-demo") / "lake"
    cli("demo", "--quick", "--lake", path)
    lake = tl.open_lake(path)
    if not lake.sql("SELECT count(*) FROM scores").rows()[0][0]:
        model = lake.sql(
            "SELECT artifact_uri FROM models WHERE kind <> 'policy' "
            "ORDER BY created_at DESC LIMIT 1"
        ).rows()
        cli("score", model[0][0], "--lake", path)
        lake = tl.open_lake(path)
    return lake


@pytest.fixture(scope="session")
def demo_server(demo_lake: tl.Lake) -> Iterator[str]:
    """The real viewer over the demo lake, on a free loopback port; yields its base URL."""
    from trajlake.view import view_in_background

    with view_in_background(demo_lake) as url:
        yield url


@pytest.fixture(scope="session")
def corpus_lake(tmp_path_factory: pytest.TempPathFactory) -> tl.Lake:
    """A lake ingested from real SWE-agent, mini-swe-agent, OpenHands, Claude Code and Inspect
    files."""
    pytest.importorskip("aiohttp", reason="the viewer server needs aiohttp (extra `view`)")
    if not SHARED_CORPUS.exists():
        pytest.skip("the shared corpus of real trajectory files is absent")
    lake = tl.open_lake(tmp_path_factory.mktemp("view-corpus") / "lake", create=True)
    for relative in CORPUS_FILES:
        lake.ingest(str(SHARED_CORPUS / relative))
    return lake


@pytest.fixture(scope="session")
def corpus_server(corpus_lake: tl.Lake) -> Iterator[str]:
    """The real viewer over the corpus lake; yields its base URL."""
    from trajlake.view import view_in_background

    with view_in_background(corpus_lake) as url:
        yield url
