"""Tiny local chat tokenizers (no hub downloads) and sample chat conversations for tests.

The tokenizers are byte-level BPE models trained in about a second on `trajlake.sample` text, with
realistic tool-calling chat templates: ChatML/Qwen-style and Llama-3-style without
`{% generation %}` markers (the case real Qwen/Llama templates present to assistant-mask code), and
a Gemma-style one whose assistant turns are wrapped in `{% generation %}` … `{% endgeneration %}`
(so `apply_chat_template(..., return_assistant_tokens_mask=True)` works on it).
It ships in the package, not under tests/, because notebooks, benchmarks and users' own tests of
tokenized export need a tokenizer that works offline; `tokenizers`/`transformers` load lazily.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trajlake.sample import sample_trajectories

__all__ = [
    "TEMPLATES",
    "ChatConversation",
    "sample_conversations",
    "tiny_chat_tokenizer",
    "to_openai_messages",
]

# Qwen2.5/Qwen3-style ChatML: tools listed in the system turn, calls as
# <tool_call>{json}</tool_call>, consecutive tool results folded into one user turn of
# <tool_response> blocks.
CHATML_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name ' }}
{{- 'and arguments ' }}
{{- 'within <tool_call></tool_call> XML tags.<|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}
{%- if message.content %}{{- message.content }}{%- endif %}
{%- if message.tool_calls %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{%- if not loop.first or message.content %}{{- '\\n' }}{%- endif %}
{{- '<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' }}
{%- if tool_call.arguments is string %}{{- tool_call.arguments }}
{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}
{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

# Llama-3.1-style: BOS, header ids, `| trim` on content, calls as bare JSON, tool results as
# ipython.
LLAMA3_TEMPLATE = """\
{{- bos_token }}
{%- if messages[0].role == 'system' %}
{%- set system_message = messages[0].content | trim %}{%- set messages = messages[1:] %}
{%- else %}{%- set system_message = '' %}{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
{%- if tools %}{{- 'Environment: ipython\\n\\n' }}{%- endif %}
{{- system_message }}
{%- if tools %}
{{- '\\n\\nYou have access to the following functions:\\n\\n' }}
{%- for tool in tools %}{{- tool | tojson(indent=2) + '\\n\\n' }}{%- endfor %}
{%- endif %}
{{- '<|eot_id|>' }}
{%- for message in messages %}
{%- if message.role == 'assistant' %}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- if message.content %}{{- message.content | trim }}{%- endif %}
{%- for tool_call in message.tool_calls or [] %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}
{{- '{"name": "' + tool_call.name + '", "parameters": ' }}
{%- if tool_call.arguments is string %}{{- tool_call.arguments }}
{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
{{- '}' }}
{%- endfor %}
{{- '<|eot_id|>' }}
{%- elif message.role == 'tool' %}
{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
{%- else %}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' }}
{{- message.content | trim + '<|eot_id|>' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# Gemma-style turns (`<start_of_turn>model` … `<end_of_turn>`), tools and system prompt in a
# leading system turn, calls as ```tool_call``` blocks, tool results as `tool` turns. The
# assistant's content, calls and end-of-turn marker sit inside `{% generation %}`, matching
# trajlake's own assistant span.
GEMMA_TEMPLATE = """\
{{- bos_token }}
{%- if messages[0].role == 'system' %}
{%- set system_message = messages[0].content %}{%- set messages = messages[1:] %}
{%- else %}{%- set system_message = '' %}{%- endif %}
{%- if system_message or tools %}
{{- '<start_of_turn>system\\n' + system_message }}
{%- if tools %}
{{- '\\n\\nTools (call one with a ```tool_call``` block holding {"name", "arguments"}):' }}
{%- for tool in tools %}{{- '\\n' + tool | tojson }}{%- endfor %}
{%- endif %}
{{- '<end_of_turn>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' %}
{{- '<start_of_turn>model\\n' }}
{%- generation %}
{%- if message.content %}{{- message.content }}{%- endif %}
{%- for tool_call in message.tool_calls or [] %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}
{{- '```tool_call\\n{"name": "' + tool_call.name + '", "arguments": ' }}
{%- if tool_call.arguments is string %}{{- tool_call.arguments }}
{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
{{- '}\\n```' }}
{%- endfor %}
{{- '<end_of_turn>' }}
{%- endgeneration %}
{{- '\\n' }}
{%- else %}
{{- '<start_of_turn>' + message.role + '\\n' + message.content + '<end_of_turn>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}
"""

TEMPLATES: dict[str, str] = {
    "chatml": CHATML_TEMPLATE,
    "llama3-like": LLAMA3_TEMPLATE,
    "gemma-like": GEMMA_TEMPLATE,
}

_SPECIAL: dict[str, list[str]] = {
    "chatml": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "llama3-like": [
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
    ],
    "gemma-like": ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"],
}


@dataclass(frozen=True)
class ChatConversation:
    """A conversation in OpenAI chat form with per-message loss weights (None: not an assistant)."""

    trajectory_id: str
    task_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    weights: list[float | None] = field(default_factory=list)


def to_openai_messages(canonical: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Canonical trajlake messages → OpenAI chat dicts (nested `function` tool calls, no extras)."""
    out: list[dict[str, Any]] = []
    for m in canonical:
        role = m["role"]
        msg: dict[str, Any] = {"role": role, "content": m.get("content") or ""}
        if role == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = [
                {
                    "id": tc["id"],
                    "type": "function",
                    "function": {"name": tc["name"], "arguments": tc["arguments"]},
                }
                for tc in m["tool_calls"]
            ]
        if role == "tool":
            msg["tool_call_id"] = m.get("tool_call_id")
            msg["name"] = m.get("name")
        out.append(msg)
    return out


def sample_conversations(
    count: int, *, seed: int = 0, start: int = 0
) -> Iterator[ChatConversation]:
    """`count` sample trajectories as chat conversations; every assistant message weighted 1.0."""
    for traj in sample_trajectories(count, seed=seed, start=start):
        messages = to_openai_messages(traj["messages"])
        weights = [1.0 if m["role"] == "assistant" else None for m in messages]
        yield ChatConversation(
            trajectory_id=traj["trajectory_id"],
            task_id=traj["task_id"],
            messages=messages,
            tools=list(traj["tools"]),
            weights=weights,
        )


def _training_texts(template: str) -> Iterator[str]:
    for conv in sample_conversations(40, seed=12345):
        yield json.dumps(conv.tools)
        for m in conv.messages:
            yield m["content"]
            for tc in m.get("tool_calls", []):
                yield json.dumps(
                    {"name": tc["function"]["name"], "arguments": tc["function"]["arguments"]}
                )
    # Always the first two templates (not all of TEMPLATES), so that adding a template leaves the
    # vocabularies of the older tokenizers unchanged.
    yield CHATML_TEMPLATE
    yield LLAMA3_TEMPLATE
    if template not in ("chatml", "llama3-like"):
        yield TEMPLATES[template]


def tiny_chat_tokenizer(
    path: str | Path | None = None,
    template: Literal["chatml", "llama3-like", "gemma-like"] = "chatml",
    *,
    vocab_size: int = 2000,
) -> Any:
    """A deterministic byte-level BPE chat tokenizer (a `PreTrainedTokenizerFast`), built locally.

    Args:
        path: if given, the tokenizer is saved there with `save_pretrained` (load it back with
            `AutoTokenizer.from_pretrained(path)`).
        template: which chat template to attach: ChatML/Qwen-style, Llama-3-style (neither with
            `{% generation %}`) or Gemma-style (assistant turns inside `{% generation %}`).
        vocab_size: BPE vocabulary size, special tokens included.

    Returns:
        The tokenizer.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if template not in TEMPLATES:
        raise ValueError(f"template must be one of {sorted(TEMPLATES)}, got {template!r}")
    specials = _SPECIAL[template]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_texts(template), trainer=trainer)
    if template == "chatml":
        names = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    elif template == "gemma-like":
        names = {"bos_token": "<bos>", "eos_token": "<end_of_turn>", "pad_token": "<pad>"}
    else:
        names = {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "pad_token": "<|end_of_text|>",
        }
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        chat_template=TEMPLATES[template],
        clean_up_tokenization_spaces=False,
        model_max_length=131072,
        **{k: v for k, v in names.items() if v is not None},
    )
    if path is not None:
        fast.save_pretrained(str(path))
    return fast
