"""Tokenizers for value nets: trained locally or loaded, and left-truncating encoding."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from trajlake.errors import missing_extra

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("torch", "train") from e

try:
    from transformers import PreTrainedTokenizerBase
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra("transformers", "train") from e


def _wordpiece_vocab(
    tok: Any, texts: Sequence[str], vocab_size: int, specials: list[str]
) -> dict[str, int]:
    """Specials, every character (word-initial and `##` continuation, so nothing is unknown),
    then whole words by frequency (ties by text) up to `vocab_size`: a deterministic vocabulary,
    unlike the `tokenizers` trainer, whose merges break ties in hash order."""
    from collections import Counter

    counts: Counter[str] = Counter()
    for text in texts:
        normalized = tok.normalizer.normalize_str(text)
        counts.update(word for word, _ in tok.pre_tokenizer.pre_tokenize_str(normalized))
    chars = sorted({c for word in counts for c in word})
    tokens = [*specials, *chars, *(f"##{c}" for c in chars)]
    seen = set(tokens)
    for word in sorted(counts, key=lambda w: (-counts[w], w)):
        if len(tokens) >= vocab_size:
            break
        if word not in seen:
            tokens.append(word)
            seen.add(word)
    return {token: i for i, token in enumerate(tokens)}


def train_tokenizer(
    texts: Sequence[str],
    *,
    vocab_size: int = 2000,
    kind: Literal["wordpiece", "bpe"] = "wordpiece",
    model_max_length: int = 512,
) -> Any:
    """Train a small tokenizer on `texts` locally (a `PreTrainedTokenizerFast`).

    Args:
        texts: the training corpus.
        vocab_size: vocabulary size, special tokens included.
        kind: "wordpiece" for encoders ([PAD]/[UNK]/[CLS]/[SEP], texts framed as [CLS] … [SEP]) or
            byte-level "bpe" for decoders (<pad>/<eos>, <eos> appended to every text). The
            WordPiece vocabulary is built deterministically (the same texts always give the
            same ids, so the same recipe on the same data gives the same model); the BPE
            trainer of `tokenizers` breaks frequency ties in hash order, so BPE vocabularies
            can differ between runs.
        model_max_length: the tokenizer's maximum length.

    Returns:
        The tokenizer, truncating on the left (see `encode`).
    """
    import tokenizers as tk
    from transformers import PreTrainedTokenizerFast

    if kind not in ("wordpiece", "bpe"):
        raise ValueError(f"kind must be 'wordpiece' or 'bpe', got {kind!r}")
    if kind == "wordpiece":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
        tok = tk.Tokenizer(tk.models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = tk.normalizers.BertNormalizer(lowercase=False)
        tok.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
        tok.decoder = tk.decoders.WordPiece()
        vocab = _wordpiece_vocab(tok, texts, vocab_size, specials)
        tok.model = tk.models.WordPiece(vocab, unk_token="[UNK]")
        trainer: Any = None
        template, names = "[CLS] $A [SEP]", {"unk_token": "[UNK]", "cls_token": "[CLS]"}
        names |= {"sep_token": "[SEP]", "pad_token": "[PAD]"}
    else:
        specials = ["<pad>", "<eos>"]
        tok = tk.Tokenizer(tk.models.BPE())
        tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = tk.decoders.ByteLevel()
        trainer = tk.trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=specials,
            initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        template, names = "$A <eos>", {"eos_token": "<eos>", "pad_token": "<pad>"}
    if trainer is not None:
        tok.train_from_iterator(list(texts), trainer=trainer)
    tok.post_processor = tk.processors.TemplateProcessing(
        single=template,
        special_tokens=[(t, tok.token_to_id(t)) for t in specials if t in template],
    )
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        model_max_length=model_max_length,
        truncation_side="left",
        padding_side="right",
        clean_up_tokenization_spaces=False,
        **names,
    )


def load_tokenizer(name_or_path: str | Path) -> Any:
    """Load a tokenizer with `AutoTokenizer`; pad with eos when it has no pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.truncation_side = "left"
    return tokenizer


def encode(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int
) -> dict[str, torch.Tensor]:
    """Tokenize and pad `texts` to `input_ids` / `attention_mask` tensors.

    The serializer already fits texts into the token budget, so truncation is only a safety net:
    it keeps a text's LAST tokens, because the end of a trajectory (final tests, submission)
    carries the outcome signal, and the special tokens stay in place ([CLS] … [SEP], or the
    trailing eos) because the tokenizer truncates before adding them (`truncation_side="left"`).
    """
    tokenizer.truncation_side = "left"
    enc = tokenizer(
        list(texts), truncation=True, max_length=max_length, padding=True, return_tensors="pt"
    )
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
