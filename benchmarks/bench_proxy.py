"""Recording proxy overhead: what `trajlake proxy` adds to a model call, as ratios in one run.

The stub upstream (`tests/proxy/stub_upstream.py`) and the proxy (`trajlake proxy`, recording
into a fresh lake, spool and commits on) each run in their own process; the client is aiohttp
in this one. Measured, interleaved direct vs through the proxy:
  - non-streaming chat completions, one at a time: latency p50/p99 and the added p50/p99;
  - streaming: time to the first content event, p50/p99 and the added p50;
  - 64 concurrent clients for a fixed time: calls/s sustained (rollouts of 4 calls, finished).
The last line is `RATIO bench_proxy ...` with the targets (added p50 ≤ 2 ms non-streaming,
≤ 5 ms to first token).

    python benchmarks/bench_proxy.py [--calls 400] [--seconds 5] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
TARGET_P50_MS = 2.0
TARGET_TTFT_MS = 5.0
STUB = (
    "import sys, time; sys.path.insert(0, {tests!r}); "
    "from stub_upstream import StubUpstream, Reply; "
    "s = StubUpstream([Reply(text='The answer is forty-two, as computed.')]).start(); "
    "print(s.url, flush=True); time.sleep(10**6)"
)
BODY: dict[str, Any] = {
    "model": "stub-model",
    "messages": [
        {"role": "system", "content": "You are a helpful coding agent. " * 20},
        {"role": "user", "content": "Fix the failing test in src/app.py. " * 10},
    ],
}


def _start_stub() -> tuple[subprocess.Popen[str], str]:
    code = STUB.format(tests=str(ROOT / "tests" / "proxy"))
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def _start_proxy(upstream: str, work: Path) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "trajlake", "proxy"]
    args = ["--lake", str(work / "lake"), "--upstream", upstream, "--port", "0"]
    args += ["--spool-dir", str(work / "spool"), "--run-id", "bench"]
    process = subprocess.Popen(command + args, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    line = process.stderr.readline()
    if "recording proxy on" not in line:
        raise RuntimeError(f"the proxy did not start: {line}")
    return process, line.split()[3]


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _call(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    async with session.post(url, json=body) as response:
        await response.read()
        if response.status != 200:
            raise RuntimeError(f"{url}: HTTP {response.status}")
    return (time.perf_counter() - started) * 1000


async def _first_token(session: aiohttp.ClientSession, url: str) -> float:
    started = time.perf_counter()
    first = None
    async with session.post(url, json=BODY | {"stream": True}) as response:
        async for line in response.content:
            if first is None and b'"content":"' in line.replace(b": ", b":") and b'""' not in line:
                first = (time.perf_counter() - started) * 1000
    assert first is not None, "no content event"
    return first


async def _sequential(direct: str, proxy: str, calls: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in ("direct", "proxy", "ttft_d", "ttft_p")}
    headers = {"Authorization": "Bearer bench-key"}
    async with aiohttp.ClientSession(headers=headers) as session:
        for i in range(calls + 20):  # 20 warm-up calls are dropped
            rollout = f"{proxy}/rollouts/seq-{i // 4}/v1/chat/completions"
            pairs = [
                ("direct", _call(session, f"{direct}/v1/chat/completions", BODY)),
                ("proxy", _call(session, rollout, BODY)),
                ("ttft_d", _first_token(session, f"{direct}/v1/chat/completions")),
                ("ttft_p", _first_token(session, rollout)),
            ]
            for key, job in pairs if i % 2 else pairs[::-1]:  # interleaved, order alternating
                value = await job
                if i >= 20:
                    out[key].append(value)
            if i % 4 == 3:
                async with session.post(f"{proxy}/rollouts/seq-{i // 4}/finish", json={}):
                    pass
    return out


async def _throughput(base: str, proxied: bool, concurrency: int, seconds: float) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def client(k: int, session: aiohttp.ClientSession) -> None:
        nonlocal done
        n = 0
        while time.perf_counter() < deadline:
            rid = f"tp-{k}-{n // 4}"
            url = f"{base}/rollouts/{rid}/v1" if proxied else f"{base}/v1"
            await _call(session, f"{url}/chat/completions", BODY)
            done += 1
            n += 1
            if proxied and n % 4 == 0:
                async with session.post(f"{base}/rollouts/{rid}/finish", json={}):
                    pass
        if proxied and n % 4:
            async with session.post(f"{base}/rollouts/tp-{k}-{n // 4}/finish", json={}):
                pass

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(k, session) for k in range(concurrency)))
        elapsed = time.perf_counter() - started
    return done / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400, help="Sequential calls per path.")
    parser.add_argument("--seconds", type=float, default=5.0, help="Throughput window.")
    parser.add_argument("--concurrency", type=int, default=64, help="Concurrent clients.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stub, direct = _start_stub()
        proxy_process, proxy = _start_proxy(direct, Path(tmp))
        try:
            seq = asyncio.run(_sequential(direct, proxy, args.calls))
            tp_direct = asyncio.run(_throughput(direct, False, args.concurrency, args.seconds))
            tp_proxy = asyncio.run(_throughput(proxy, True, args.concurrency, args.seconds))
        finally:
            proxy_process.terminate()
            proxy_process.wait(60)
            stub.terminate()
            stub.wait(10)
        import trajlake as tl

        lake = tl.open_lake(Path(tmp) / "lake")
        stored = lake.sql("SELECT count(*) AS n FROM calls").to_dicts()[0]["n"]
    report(seq, tp_direct, tp_proxy, stored, args.concurrency)


def report(
    seq: dict[str, list[float]], tp_direct: float, tp_proxy: float, stored: int, conc: int
) -> None:
    """Print the summary and the RATIO line."""
    p50 = {k: _pct(v, 0.5) for k, v in seq.items()}
    p99 = {k: _pct(v, 0.99) for k, v in seq.items()}
    added = p50["proxy"] - p50["direct"]
    added99 = p99["proxy"] - p99["direct"]
    ttft = p50["ttft_p"] - p50["ttft_d"]
    n = len(seq["direct"])
    print(f"non-streaming, {n} sequential calls each (ms):")
    print(f"  direct  p50 {p50['direct']:.2f}  p99 {p99['direct']:.2f}")
    print(f"  proxy   p50 {p50['proxy']:.2f}  p99 {p99['proxy']:.2f}")
    print(f"  added   p50 {added:.2f}  p99 {added99:.2f}  (target p50 <= {TARGET_P50_MS})")
    print("streaming, time to first content event (ms):")
    print(f"  direct  p50 {p50['ttft_d']:.2f}  p99 {p99['ttft_d']:.2f}")
    print(f"  proxy   p50 {p50['ttft_p']:.2f}  p99 {p99['ttft_p']:.2f}")
    print(f"  added   p50 {ttft:.2f}  (target <= {TARGET_TTFT_MS})")
    print(f"throughput, {conc} concurrent clients (calls/s):")
    print(f"  direct {tp_direct:.0f}  proxy {tp_proxy:.0f}  ratio {tp_proxy / tp_direct:.2f}")
    print(f"calls stored in the lake: {stored}")
    print(
        f"RATIO bench_proxy latency proxy/direct p50={p50['proxy'] / p50['direct']:.2f} "
        f"added_p50_ms={added:.2f} (target <= {TARGET_P50_MS}) "
        f"added_ttft_p50_ms={ttft:.2f} (target <= {TARGET_TTFT_MS}) "
        f"throughput proxy/direct={tp_proxy / tp_direct:.2f}"
    )


if __name__ == "__main__":
    main()
