"""Tokenized SFT export throughput: masked tokenization vs the bare tokenizer on the same data.

Three paths over the same sample conversations (tools + tool calls), with a tiny local tokenizer
(`trajlake.testing_tokenizer`, ChatML/Qwen-style template without `{% generation %}`):

- bare: `apply_chat_template(..., tokenize=False)` + `tokenizer(text)`, no mask at all;
- tokenized: `tokenize_conversations` (verified sentinel fast path: two renders, one tokenization);
- reference: the same rows built by incremental prefix rendering (one render per assistant turn).

Run: `python benchmarks/bench_export.py [--conversations 300 --template chatml --repeat 3]`.
Before it, `peak RSS: … MiB` (the process's `ru_maxrss`: all three paths, tokenizer and data
included). The last line is `RATIO bench_export tokenized/bare=… (target >= 0.7)`.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

from trajlake.export.tokenize import TokenizedStats, tokenize_conversations
from trajlake.testing_tokenizer import (
    TEMPLATES,
    ChatConversation,
    sample_conversations,
    tiny_chat_tokenizer,
)


def bare(tok: Any, convs: list[ChatConversation]) -> int:
    tokens = 0
    for c in convs:
        text = tok.apply_chat_template(c.messages, tools=c.tools, tokenize=False)
        tokens += len(tok(text, add_special_tokens=False)["input_ids"])
    return tokens


def tokenized(tok: Any, convs: list[ChatConversation], method: str = "auto") -> int:
    stats = TokenizedStats()
    for _ in tokenize_conversations(tok, convs, stats=stats, method=method):  # type: ignore[arg-type]
        pass
    if method == "auto" and stats.reference_fallbacks:
        print(f"  note: {stats.reference_fallbacks} conversations fell back to the reference")
    return stats.tokens


def best_of(repeat: int, fn: Callable[[], int]) -> tuple[float, int]:
    best, tokens = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        tokens = fn()
        best = min(best, time.perf_counter() - t0)
    return best, tokens


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--template", choices=sorted(TEMPLATES), default="chatml")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    tok = tiny_chat_tokenizer(template=args.template)
    convs = list(sample_conversations(args.conversations, seed=1))
    bare(tok, convs[:5])  # compile the template once, outside the timings
    n = len(convs)
    results: dict[str, float] = {}
    for name, fn in (
        ("bare", lambda: bare(tok, convs)),
        ("tokenized", lambda: tokenized(tok, convs)),
        ("reference", lambda: tokenized(tok, convs, "reference")),
    ):
        secs, tokens = best_of(args.repeat if name != "reference" else 1, fn)
        results[name] = secs
        print(
            f"{name:>10}: {n / secs:9.1f} conversations/s  {tokens / secs:12.0f} tokens/s  "
            f"({secs:.2f} s, {tokens} tokens)"
        )
    print(f"reference/bare={results['bare'] / results['reference']:.3f}")
    print(f"peak RSS: {peak_rss_mib():.1f} MiB")
    ratio = results["bare"] / results["tokenized"]
    print(f"RATIO bench_export tokenized/bare={ratio:.3f} (target >= 0.7)")


if __name__ == "__main__":
    main()
