"""Reranking speed: scoring latency and throughput of a value model, and what the layers on top
of the bare forward pass cost, as ratios measured in the same run.

CPU (default): the tiny recipe's architecture (`models/tiny.yaml`, weights untrained: speed does
not depend on them) scores synthetic trajectories.
  - `Reranker.score` vs the bare forward pass on pre-tokenized inputs (serialization and
    tokenization overhead), candidates/s and tokens/s;
  - best-of-16 latency p50/p99 through `Reranker.score` and through the HTTP endpoint
    (`trajlake serve`) called with `requests` (HTTP + JSON + batching overhead).

GPU (`--gpu`): a Qwen2.5-0.5B-shaped decoder built from its config (no download), bf16:
training tokens/s and model FLOPs utilisation (6·N·tokens/s over the device's dense bf16 peak),
and reranking latency for 16 candidates × 4k tokens.

    python benchmarks/bench_rerank.py [--candidates 16] [--repeats 30] [--gpu]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trajlake.synth import SynthConfig, generate
from trajlake.value.neural import ValueNet, encode, save_value_net, train_tokenizer
from trajlake.value.serialize import Serializer

TINY = {
    "model_type": "bert",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
}
QWEN_05B = {
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0}


def _percentiles(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return f"p50 {statistics.median(ms):.1f} ms, p99 {p99:.1f} ms"


def _timed(fn: Callable[[], Any], repeats: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def _tiny_model(directory: Path, texts: list[str]) -> None:
    tokenizer = train_tokenizer(texts, vocab_size=2000, model_max_length=512)
    torch.manual_seed(0)
    model = ValueNet.from_backbone_config({**TINY, "vocab_size": len(tokenizer)})
    serializer = Serializer("whole", max_tokens=510, observation_max_tokens=48)
    save_value_net(
        directory, model, tokenizer, model.spec(max_length=512, serializer=serializer.to_dict())
    )


def _http_latency(reranker: Any, candidates: list[Any], repeats: int) -> list[float]:
    import requests

    from trajlake.serve import serve_in_background

    with serve_in_background(reranker) as base, requests.Session() as session:
        url = f"{base}/v1/rerank"
        return _timed(
            lambda: session.post(url, json={"candidates": candidates}).raise_for_status(), repeats
        )


def _messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    keep = ("role", "content", "tool_call_id", "name")
    out = []
    for m in row["messages"]:
        message = {k: m[k] for k in keep if m.get(k) is not None}
        if m.get("tool_calls"):
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in m["tool_calls"]
            ]
        out.append(message)
    return out


def cpu(args: argparse.Namespace) -> None:
    from trajlake.serve import Reranker

    rows = generate(SynthConfig(seed=0, n_tasks=16, rollouts_per_task=args.candidates)).trajectories
    candidates = [{"messages": _messages(r), "final_output": r.get("final_output")} for r in rows]
    with tempfile.TemporaryDirectory() as tmp:
        texts = Serializer("whole", max_tokens=510).texts(candidates)
        _tiny_model(Path(tmp), texts)
        reranker = Reranker.load(tmp, device="cpu", batch_size=16)
        group = candidates[: args.candidates]
        inputs = encode(reranker.tokenizer, reranker.texts(group), 512)
        n_tokens = int(inputs["attention_mask"].sum())

        def bare() -> None:
            with torch.no_grad():
                reranker.model.eval()
                reranker.model(inputs["input_ids"], inputs["attention_mask"])

        bare_s = _timed(bare, args.repeats)
        score_s = _timed(lambda: reranker.score(group), args.repeats)
        http_s = _http_latency(reranker, group, args.repeats)  # the same candidates as JSON
        started = time.perf_counter()
        reranker.score(candidates)
        throughput = len(candidates) / (time.perf_counter() - started)
    tokens = n_tokens / len(group)
    threads = torch.get_num_threads()
    print(f"tiny model on CPU ({threads} threads), {len(group)} candidates × ~{tokens:.0f} tokens")
    print(f"  bare forward (pre-tokenized):  {_percentiles(bare_s)}")
    print(f"  Reranker.score:                {_percentiles(score_s)}")
    print(f"  HTTP POST /v1/rerank:          {_percentiles(http_s)}")
    med = statistics.median
    print(f"  ratio score / bare forward:    {med(score_s) / med(bare_s):.2f}")
    print(f"  ratio HTTP / score:            {med(http_s) / med(score_s):.2f}")
    print(f"  throughput: {throughput:.0f} candidates/s, {throughput * tokens:.0f} tokens/s")
    print(
        f"RATIO score/bare {med(score_s) / med(bare_s):.2f} "
        f"http/score {med(http_s) / med(score_s):.2f}"
    )


def gpu(args: argparse.Namespace) -> None:
    device = torch.device("cuda")
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    torch.manual_seed(0)
    model = ValueNet.from_backbone_config(QWEN_05B).to(device=device, dtype=torch.bfloat16)
    model.head.float()
    model.enable_gradient_checkpointing()
    n_params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batch, length = 4, 4096
    ids = torch.randint(0, QWEN_05B["vocab_size"], (batch, length), device=device)
    mask = torch.ones_like(ids)
    labels = torch.randint(0, 2, (batch,), device=device).float()

    def step() -> None:
        logits = model(ids, mask)
        torch.nn.functional.binary_cross_entropy_with_logits(logits, labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()

    train_s = _timed(step, 10)
    tokens_per_s = batch * length / statistics.median(train_s)
    model.eval()
    cand = torch.randint(0, QWEN_05B["vocab_size"], (16, length), device=device)

    def rerank() -> None:
        with torch.no_grad():
            model(cand, torch.ones_like(cand))
        torch.cuda.synchronize()

    rerank_s = _timed(rerank, args.repeats)
    print(f"{name}: Qwen2.5-0.5B-shaped decoder ({n_params / 1e6:.0f} M parameters), bf16")
    print(f"  training: {tokens_per_s:.0f} tokens/s (batch {batch} × {length}, grad checkpointing)")
    if peak:
        print(f"  MFU: {6 * n_params * tokens_per_s / (peak * 1e12):.1%} of {peak:.0f} TFLOPS bf16")
    print(f"  rerank 16 × {length} tokens: {_percentiles(rerank_s)}")
    per_token = (np.median(rerank_s) / 16) / (np.median(train_s) / batch)
    print(f"  ratio rerank / train step per candidate: {per_token:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--gpu", action="store_true", help="Run the GPU benchmark (needs CUDA).")
    args = parser.parse_args()
    if args.gpu:
        if not torch.cuda.is_available():
            raise SystemExit("--gpu needs a CUDA device")
        gpu(args)
    else:
        cpu(args)


if __name__ == "__main__":
    main()
