"""Recording proxy overhead: what `trajlake proxy` adds to a model call, as ratios in one run.

The stub upstream (`tests/proxy/stub_upstream.py`) and the proxy (`trajlake proxy`, recording
into a fresh lake, spool and commits on) each run in their own process; the client is aiohttp
in this one. Measured, interleaved direct vs through the proxy:
  - non-streaming chat completions, one at a time: latency p50/p99 and the added p50/p99;
  - streaming: time to the first content event, p50/p99 and the added p50;
  - 64 concurrent clients for a fixed time: calls/s sustained (rollouts of 4 calls, finished).
The last line is `RATIO bench_proxy ...` with the targets (added p50 ≤ 2 ms non-streaming,
≤ 5 ms to first token).

A hostile-load run follows (the hostile clients in another process): slow-head and slow-body
sockets, large and oversized bodies, while normal calls are timed; it prints their p50/p99
unloaded, under slow clients and with large recorded bodies added (target p99 < 2x unloaded in
both) and the proxy's peak RSS (VmHWM, bound 1 GiB). It stops by itself (about 40 s).

    python benchmarks/bench_proxy.py [--calls 400] [--seconds 5] [--concurrency 64]
    python benchmarks/bench_proxy.py --only hostile [--hostile-seconds 8]
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


def _start_proxy(
    upstream: str, work: Path, limits: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "trajlake", "proxy", *(f"--limit={x}" for x in limits)]
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


# --------------------------------------------------------------------------- hostile load

HOSTILE = {"slow_heads": 300, "slow_bodies": 200, "large_mb": 16, "oversized_mb": 100}
RSS_BOUND_MIB = 1024
HOSTILE_LIMITS = ("header_timeout_s=4", "body_timeout_s=4")


def _hostile_clients(url: str, seconds: float, with_large: bool) -> None:
    """The hostile side (run in its own process): dribbling sockets and large bodies."""
    sys.path.insert(0, str(ROOT / "tests"))
    import threading

    import requests
    from _slow_clients import Dribblers, connect, head, send_quietly

    heads = Dribblers(url, HOSTILE["slow_heads"], 1.0, reconnect=True).open()
    bodies = Dribblers(url, HOSTILE["slow_bodies"], 1.0, reconnect=True).open(body_after_head=True)
    deadline = time.monotonic() + seconds
    sent = {"large": 0, "oversized": 0}

    def large() -> None:  # under the body limit: read, forwarded (the stub refuses it)
        body = b'{"model": "m", "pad": "' + b"x" * (HOSTILE["large_mb"] << 20) + b'"}'
        while time.monotonic() < deadline:
            requests.post(f"{url}/v1/chat/completions", data=body, timeout=30)
            sent["large"] += 1
            time.sleep(0.5)

    def oversized() -> None:  # declared past the limit: refused before it is read
        chunk = b"x" * (1 << 20)
        while time.monotonic() < deadline:
            with connect(url) as sock:
                send_quietly(sock, head(url, "/v1/chat/completions", HOSTILE["oversized_mb"] << 20))
                for _ in range(HOSTILE["oversized_mb"]):
                    if not send_quietly(sock, chunk):
                        break
            sent["oversized"] += 1
            time.sleep(0.2)

    jobs = (large, large, oversized) if with_large else (oversized,)
    workers = [threading.Thread(target=f, daemon=True) for f in jobs]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(seconds + 30)
    heads.close()
    bodies.close()
    closed = heads.closed_by_server + bodies.closed_by_server
    print(f"{sent['large']} large, {sent['oversized']} oversized, {closed} slow closed", flush=True)


async def _normal_calls(proxy: str, seconds: float) -> list[float]:
    """Sequential ordinary calls for `seconds` (after 10 untimed); their latencies in ms."""
    out: list[float] = []
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer bench-key"}) as session:
        for _ in range(10):
            await _call(session, f"{proxy}/v1/chat/completions", BODY)
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            out.append(await _call(session, f"{proxy}/v1/chat/completions", BODY))
            await asyncio.sleep(0.005)  # a paced client, not a saturating one
    return out


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/<pid>/status")


def _children(pid: int) -> list[int]:
    """The proxy's child processes (its recording process, started by one of its threads)."""
    tasks = Path(f"/proc/{pid}/task").glob("*/children")
    return [int(c) for task in tasks for c in task.read_text().split()]


def _under_load(proxy: str, seconds: float, with_large: bool) -> tuple[list[float], str]:
    """Normal calls timed while the hostile clients run (started 4 s before, to connect)."""
    command = [sys.executable, __file__, "--hostile-clients", proxy, str(seconds + 4)]
    clients = subprocess.Popen(command + ["large"] * with_large, stdout=subprocess.PIPE, text=True)
    time.sleep(4.0)  # every slow socket connected, bodies flowing
    loaded = asyncio.run(_normal_calls(proxy, seconds))
    assert clients.stdout is not None
    summary = clients.stdout.read().strip()
    clients.wait(60)
    return loaded, summary


def hostile(seconds: float) -> None:
    """Normal calls unloaded, under hostile clients, and with large accepted bodies added;
    prints latencies, the proxy's peak RSS and a RATIO line."""
    with tempfile.TemporaryDirectory() as tmp:
        stub, direct = _start_stub()
        # Short client timeouts, so the slow sockets are closed (and reconnect) within the run.
        proxy_process, proxy = _start_proxy(direct, Path(tmp), HOSTILE_LIMITS)
        try:
            quiet = asyncio.run(_normal_calls(proxy, seconds))
            slow, slow_summary = _under_load(proxy, seconds, False)
            large, large_summary = _under_load(proxy, seconds, True)
            rss = _peak_rss_mib(proxy_process.pid)
            worker_rss = sum(_peak_rss_mib(c) for c in _children(proxy_process.pid))
        finally:
            proxy_process.terminate()
            proxy_process.wait(60)
            stub.terminate()
            stub.wait(10)
    print(f"hostile load: {HOSTILE['slow_heads']} slow-head + {HOSTILE['slow_bodies']} slow-body")
    print(f"sockets (reconnecting; proxy --limit {' '.join(HOSTILE_LIMITS)}) and")
    print(f"{HOSTILE['oversized_mb']} MiB bodies refused; then 2 clients sending")
    print(f"{HOSTILE['large_mb']} MiB bodies (recorded) added. Normal calls (ms):")
    _row("unloaded", quiet, quiet)
    _row(f"hostile ({slow_summary})", slow, quiet)
    _row(f"+ large ({large_summary})", large, quiet)
    print(
        f"  proxy peak RSS (VmHWM) {rss:.0f} MiB + recording process {worker_rss:.0f} MiB "
        f"(bound {RSS_BOUND_MIB} MiB for both)"
    )
    rss += worker_rss
    ratio, ratio_large = _pct(slow, 0.99) / _pct(quiet, 0.99), _pct(large, 0.99) / _pct(quiet, 0.99)
    met = "met" if ratio < 2 and rss < RSS_BOUND_MIB else "NOT met"
    met_large = "met" if ratio_large < 2 else "NOT met"
    print(
        f"RATIO bench_proxy_hostile p99 hostile/unloaded={ratio:.2f} (target < 2) "
        f"peak_rss_mib={rss:.0f} (bound {RSS_BOUND_MIB}): {met}; "
        f"with_large_bodies={ratio_large:.2f} (target < 2): {met_large}"
    )


def _row(name: str, samples: list[float], quiet: list[float]) -> None:
    p50, p99 = _pct(samples, 0.5), _pct(samples, 0.99)
    ratio = p99 / _pct(quiet, 0.99)
    print(f"  {name}: n {len(samples)}  p50 {p50:.2f}  p99 {p99:.2f}  p99/unloaded {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400, help="Sequential calls per path.")
    parser.add_argument("--seconds", type=float, default=5.0, help="Throughput window.")
    parser.add_argument("--concurrency", type=int, default=64, help="Concurrent clients.")
    parser.add_argument("--only", choices=["overhead", "hostile"], default=None)
    parser.add_argument("--hostile-seconds", type=float, default=8.0, help="Each timed phase.")
    parser.add_argument("--hostile-clients", nargs="+", metavar="ARG", help="(internal)")
    args = parser.parse_args()
    if args.hostile_clients:
        url, seconds, *large = args.hostile_clients
        _hostile_clients(url, float(seconds), bool(large))
        return
    if args.only != "hostile":
        overhead(args)
    if args.only != "overhead":
        hostile(args.hostile_seconds)


def overhead(args: argparse.Namespace) -> None:
    """The overhead runs: sequential latency, time to first token, throughput."""
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
