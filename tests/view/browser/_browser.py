"""Helpers shared by the browser tests: origin checks and reading the page's state."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from click.testing import CliRunner


def cli(*args: object) -> str:
    """Run `trajlake ARGS` in-process; fail the test with its output unless it exits 0."""
    from trajlake.cli.main import cli as command

    result = CliRunner().invoke(command, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, f"trajlake {args} exited {result.exit_code}:\n{result.output}"
    return result.stdout


def assert_only_own_origin(page: Any, base_url: str) -> None:
    """Every request the page made went to the server that served it (or was a data: URL), and
    no script raised."""
    origin = base_url.rstrip("/") + "/"
    assert page.requests, "the page made no requests at all"
    elsewhere = [u for u in page.requests if not (u.startswith(origin) or u.startswith("data:"))]
    assert elsewhere == [], f"requests outside {origin}: {elsewhere}"
    assert page.errors == [], f"script errors: {page.errors}"


def assert_only_bundle_files(page: Any, bundle: Path) -> None:
    """Every request of a bundle page was a file inside the bundle folder."""
    inside = bundle.resolve().as_uri() + "/"
    elsewhere = [u for u in page.requests if not u.startswith(inside)]
    assert elsewhere == [], f"requests outside {inside}: {elsewhere}"
    assert page.errors == [], f"script errors: {page.errors}"


def route(path: str, *parts: str, **params: str) -> str:
    """A hash route as the page builds them: `#/t/<id>?credit=RUN`."""
    query = "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items() if v)
    segments = "/".join([path, *(quote(p, safe="") for p in parts)])
    return f"#/{segments}" + (f"?{query}" if query else "")


def transcript_state(page: Any) -> dict[str, Any]:
    """What a reader sees of a transcript with its credit overlay, for comparing two pages:
    turn ids in order, every turn's strip colours, and each curve's markers."""
    return page.evaluate(
        """() => ({
          turns: [...document.querySelectorAll('.turn')].map(
            t => t.dataset.thread + '|' + t.dataset.turn),
          strips: [...document.querySelectorAll('.turn')].map(t =>
            [...t.querySelectorAll('.strip')].map(s => s.style.background)),
          curves: [...document.querySelectorAll('svg.value-curve')].map(svg => ({
            run: svg.dataset.run,
            points: [...svg.querySelectorAll('circle.v-point')].map(c =>
              [c.dataset.turn, c.getAttribute('cy'), c.getAttribute('fill')]),
          })),
          header: document.querySelector('.transcript-header .facts').innerText,
        })"""
    )


def wait_text(page: Any, selector: str, pattern: str) -> None:
    """Waits until the element's text matches `pattern` (a regular expression)."""
    from playwright.sync_api import expect

    expect(page.locator(selector).first).to_have_text(re.compile(pattern))
