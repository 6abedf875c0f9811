"""Proxy fixtures: stub upstreams served on 127.0.0.1 (a free port) from a background thread."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from stub_upstream import Reply, Step, StubUpstream

MakeStub = Callable[..., StubUpstream]


@pytest.fixture
def make_stub() -> Iterator[MakeStub]:
    """Start stubs: `make_stub(step, ..., return_token_ids=..., ...)`; all stop after the test."""
    started: list[StubUpstream] = []

    def make(*script: Step, **options: Any) -> StubUpstream:
        stub = StubUpstream(script or (Reply(text="ok"),), **options).start()
        started.append(stub)
        return stub

    yield make
    for stub in started:
        stub.stop()


@pytest.fixture
def stub_upstream(make_stub: MakeStub) -> StubUpstream:
    """A running stub that answers every call with the text "ok"; set `.script` to change it."""
    return make_stub()
