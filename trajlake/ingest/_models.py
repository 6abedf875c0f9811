"""Model names: one normal form for `policy_model`, the dominant model of a trajectory, and the
task source a task id implies.

Normal form: `<maker>/<model>`, the maker in lower case and the model as written —
`anthropic/claude-sonnet-4-5-20250929`, `openai/gpt-4o`, `google/gemini-3-pro-preview`,
`qwen/Qwen3-8B` (hub ids are case-sensitive, so case is kept). Routing and provider prefixes
(LiteLLM's `anthropic/`, `bedrock/`, `vertex_ai/`, `openrouter/`, `hosted_vllm/` …, a leading
`@`, Bedrock's `us.anthropic.` ids) are dropped; the maker is the organisation the name carries
(`meta-llama/…`) or, for a bare name, the one its family is known by (`claude` → anthropic,
`gpt`/`o3` → openai, `gemini` → google). A bare name of an unknown family stays bare. The name as
the source wrote it is kept in `attrs.raw_policy_model` when it differs.

The policy is the model the source declares for the run when its messages name at most one
model; when they name several, it is the model of most assistant messages (then most completion
tokens, then first used). Every model and its message count is listed in `attrs.models`.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import Any

from trajlake.schema import CanonicalTrajectory

_ROUTERS = frozenset(
    {"openrouter", "litellm_proxy", "litellm", "bedrock", "bedrock_converse", "vertex_ai"}
    | {"vertex_ai_beta", "azure", "azure_ai", "together_ai", "together", "fireworks_ai"}
    | {"fireworks", "groq", "hosted_vllm", "vllm", "ollama", "ollama_chat", "huggingface"}
    | {"sagemaker", "deepinfra", "cerebras", "nebius", "novita", "sambanova", "watsonx"}
    | {"anyscale", "openai_compatible", "custom_openai", "text-completion-openai", "gemini"}
    | {"databricks", "nvidia_nim", "lm_studio", "openai", "anthropic", "mistral", "xai"}
    | {"deepseek", "cohere", "cohere_chat", "perplexity", "dashscope", "moonshot", "azureai"}
)
"""First path segments that name where a call was routed, not who made the model."""

_MAKER_OF_ROUTER = {
    "openai": "openai", "anthropic": "anthropic", "gemini": "google", "vertex_ai": "google",
    "vertex_ai_beta": "google", "mistral": "mistralai", "xai": "xai", "deepseek": "deepseek",
    "cohere": "cohere", "cohere_chat": "cohere", "dashscope": "qwen", "moonshot": "moonshotai",
}  # fmt: skip
"""Providers that serve only their own models: the maker when a bare name does not say it."""

_FAMILIES: tuple[tuple[str, str], ...] = (
    (r"claude", "anthropic"),
    (r"(gpt|chatgpt|o[1-9]|codex|text-davinci|davinci|computer-use)\b|gpt-", "openai"),
    (r"(gemini|gemma)", "google"),
    (r"(mistral|mixtral|codestral|devstral|magistral|ministral)", "mistralai"),
    (r"deepseek", "deepseek"),
    (r"grok", "xai"),
    (r"(llama|meta-llama)", "meta-llama"),
    (r"(qwen|qwq)", "qwen"),
    (r"kimi", "moonshotai"),
    (r"glm", "z-ai"),
    (r"command", "cohere"),
)
_BEDROCK = re.compile(r"^(?:(?:us|eu|apac|global)\.)?([a-z0-9-]+)\.(.+)$")
_BEDROCK_MAKERS = {"anthropic": "anthropic", "meta": "meta-llama", "amazon": "amazon"}
_BEDROCK_MAKERS |= {
    "mistral": "mistralai",
    "cohere": "cohere",
    "ai21": "ai21",
    "deepseek": "deepseek",
}
_NOT_A_MODEL = frozenset({"<synthetic>", "unknown", "none", "null", ""})


def normalize_model(name: str | None) -> str | None:
    """The normal form of a model name (see module doc); None for no name or a placeholder."""
    if not isinstance(name, str):
        return None
    return _normal_form(name)


# A run names a handful of models, asked for once per trajectory and message: remembered.
@functools.lru_cache(maxsize=4096)
def _normal_form(name: str) -> str | None:
    text = name.strip().lstrip("@").strip("/")
    if text.lower() in _NOT_A_MODEL:
        return None
    head, colon, rest = text.partition(":")
    if colon and "/" not in head and head.lower() in _ROUTERS | {"google"}:
        text = f"{head}/{rest}"  # `openai:gpt-4o` (pydantic-ai, tau2-bench) names a provider too
    parts = [p for p in text.split("/") if p]
    hint = None
    while len(parts) > 1 and parts[0].lower() in _ROUTERS:
        hint = hint or _MAKER_OF_ROUTER.get(parts[0].lower())
        parts = parts[1:]
    if len(parts) > 1:  # an organisation the name itself carries
        return f"{parts[0].lower()}/{'/'.join(parts[1:])}"
    model = parts[0] if parts else text
    bedrock = _BEDROCK.match(model)
    if bedrock and bedrock.group(1) in _BEDROCK_MAKERS:
        return f"{_BEDROCK_MAKERS[bedrock.group(1)]}/{bedrock.group(2)}"
    for pattern, maker in _FAMILIES:
        if re.match(pattern, model.lower()):
            return f"{maker}/{model}"
    return f"{hint}/{model}" if hint else model


def dominant_model(messages: list[Any]) -> tuple[str | None, dict[str, int]]:
    """The model of most assistant messages (then most completion tokens, then first used),
    and every model with its assistant message count, from the main thread when it names any."""
    assistants = [m for m in messages if m.role == "assistant" and normalize_model(m.model)]
    main = [m for m in assistants if m.thread == "main"]
    counts: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    first: dict[str, int] = {}
    for i, m in enumerate(main or assistants):
        counts[m.model] += 1
        tokens[m.model] += m.completion_tokens or 0
        first.setdefault(m.model, i)
    if not counts:
        return None, {}
    best = min(counts, key=lambda k: (-counts[k], -tokens[k], first[k]))
    every = Counter(m.model for m in assistants)
    return best, dict(sorted(every.items(), key=lambda kv: first.get(kv[0], len(first))))


def finish_model_fields(record: CanonicalTrajectory) -> CanonicalTrajectory:
    """Set `policy_model` to the normal form of the dominant model (the declared model when no
    message names one), keep the raw name and the model list in attrs. Idempotent.

    Runs once per parsed record (adapters call it last); `records.py` need not know of it.
    """
    attrs = dict(record.attrs or {})
    declared = attrs.get("raw_policy_model") or record.policy_model
    best, every = dominant_model(record.messages)
    # One model served: the run's configured name (a deployment, a route) says which run it is.
    # Several: the configured one is only where it started, so the dominant one is the policy.
    raw = best if best is not None and (len(every) > 1 or not declared) else declared
    normal = normalize_model(raw)
    record.policy_model = normal
    if raw and raw != normal:
        attrs["raw_policy_model"] = raw
    else:
        attrs.pop("raw_policy_model", None)
    if every and (len(every) > 1 or "models" not in attrs):
        attrs.setdefault("models", every)
    record.attrs = attrs or None
    return record


_SWE_BENCH_ID = re.compile(r"^[A-Za-z0-9][\w.-]*__[\w.-]+-\d+$")


def task_source_of(task_id: str | None) -> str | None:
    """The benchmark a task id names by its shape: SWE-bench's `owner__repo-N` → 'swe-bench'
    (the split — Verified, Lite, full — is not in the id; adapters that know it say it)."""
    return "swe-bench" if task_id and _SWE_BENCH_ID.match(task_id) else None
