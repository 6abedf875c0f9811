"""Proxy fixtures: stub upstreams served on 127.0.0.1 (a free port) from a background thread,
and recording proxies in front of them writing into the test's lake."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from stub_upstream import Reply, Step, StubUpstream

import trajlake as tl
from trajlake.proxy.server import ProxyThread


@pytest.fixture(autouse=True)
def _collect_client_sockets() -> Iterator[None]:
    """Collect what a proxy test leaves behind before the next test starts.

    Client libraries (httpx under the SDKs, requests) can keep a connection of a cut stream or a
    refused call in a reference cycle; its socket is closed whenever the cycle is collected, which
    would otherwise happen in some unrelated later test and fail it there with a ResourceWarning.
    """
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


MakeStub = Callable[..., StubUpstream]
StartProxy = Callable[..., ProxyThread]


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


@pytest.fixture
def start_proxy(lake: tl.Lake, tmp_path: Path) -> Iterator[StartProxy]:
    """Start proxies into the test's lake: `start_proxy(upstream, **options)`; all stop after."""
    started: list[ProxyThread] = []

    def start(upstream: str, **options: Any) -> ProxyThread:
        proxy = ProxyThread(lake, upstream, spool_dir=tmp_path / "spool", **options).start()
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()
