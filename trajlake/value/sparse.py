"""The sparse text value model: hashed word and bigram features of a conversation (actions,
observations, issue, final output, the last turns), optionally a few trajectory scalars, and a
linear logistic model over them. Numpy only; fits and scores in seconds on a CPU.

It reads the same `Conversation` the neural models read, so one model scores lake rows and raw
candidates (canonical records, OpenAI message lists) alike. Fitting is `_sparse_fit`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np
import numpy.typing as npt

from trajlake._text_hashing import (
    NgramHasher,
    argument_words,
    buckets,
    words,
)
from trajlake.errors import ModelFormatError, NoSuchTrajectory
from trajlake.value.model_files import SPARSE_FILE
from trajlake.value.serialize import ChatMessage, Conversation, as_conversation

if TYPE_CHECKING:
    from trajlake.lake import LakeStore

FORMAT = "trajlake.sparse-value/1"
WEIGHTS_FILE = "sparse_value.npz"

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Field = Literal["actions", "thoughts", "observations", "issue", "final", "recent"]

NAMESPACES = (
    "actions",
    "thoughts",
    "observations",
    "issue",
    "final",
    "recent_actions",
    "recent_observations",
)
"""Every token field, in a fixed order: a field's position salts its hashes, so the same word
in an action and in an observation lands in different buckets."""

SCALARS = (
    "log_turns",
    "log_chars",
    "submitted",
    "tool_error_share",
    "last_tests_passed",
    "last_tests_failed",
)

_ERROR = re.compile(r"traceback|\berror\b|exception|exit code [1-9]|command not found", re.I)
_TEST_CALL = re.compile(r"pytest|unittest|\btox\b|npm test|go test|cargo test|run_tests", re.I)
_PASSED = re.compile(r"\bpassed\b|\bok\b", re.I)
_FAILED = re.compile(r"\bfailed\b|\berrors?\b|traceback", re.I)
_SUBMIT = re.compile(r"submit", re.I)


@dataclass(frozen=True)
class SparseFeatures:
    """What the features of a conversation are (recorded with the model; scoring reuses it)."""

    fields: tuple[Field, ...] = ("actions", "observations", "issue", "final", "recent")
    buckets: int = 2**18
    recent_turns: int = 3
    observation_head: int = 24
    observation_tail: int = 40
    issue_words: int = 64
    final_words: int = 200
    scalars: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.fields) - set(get_args(Field))
        if unknown:
            raise ValueError(f"unknown sparse feature fields: {sorted(unknown)}")
        if self.buckets < 16:
            raise ValueError(f"buckets must be >= 16, got {self.buckets}")


# ----------------------------------------------------------------------------- token fields


def _action_words(message: ChatMessage) -> list[str]:
    out: list[str] = []
    for name, arguments in message.tool_calls:
        out.append("tool_" + re.sub(r"\W", "_", name.lower()))
        out += argument_words(arguments)
    return out[:64]


@dataclass
class _Turn:
    """One assistant message and the tool/user messages that answered it."""

    action: ChatMessage
    observations: list[str] = field(default_factory=list)


def _turns(conv: Conversation) -> list[_Turn]:
    turns: list[_Turn] = []
    for message in conv.messages:
        if message.role == "assistant":
            turns.append(_Turn(message))
        elif turns and message.role in ("tool", "user"):
            turns[-1].observations.append(message.content)
    return turns


def token_fields(conv: Conversation, spec: SparseFeatures) -> list[list[str]]:
    """The conversation's token lists, one per entry of `NAMESPACES` (empty when not used)."""
    turns = _turns(conv)
    acts = [_action_words(t.action) for t in turns]
    obs = [
        [w for o in t.observations for w in words(o, spec.observation_head, spec.observation_tail)]
        for t in turns
    ]
    wanted = set(spec.fields)
    out: dict[str, list[str]] = {name: [] for name in NAMESPACES}
    if "actions" in wanted:
        out["actions"] = [w for a in acts for w in a]
    if "thoughts" in wanted:
        out["thoughts"] = [w for t in turns for w in words(t.action.content, 12, 12)]
    if "observations" in wanted:
        out["observations"] = [w for o in obs for w in o]
    if "issue" in wanted:
        out["issue"] = words(conv.task, spec.issue_words, 1)[: spec.issue_words]
    if "final" in wanted and conv.final_output:
        half = spec.final_words // 2
        out["final"] = words(conv.final_output, half, spec.final_words - half)
    if "recent" in wanted and turns:
        k = spec.recent_turns
        out["recent_actions"] = [w for a in acts[-k:] for w in a]
        out["recent_observations"] = [w for o in obs[-k:] for w in o]
    return [out[name] for name in NAMESPACES]


def scalar_features(conv: Conversation) -> list[float]:
    """`SCALARS` of one conversation, read from its messages (no lake columns)."""
    turns = _turns(conv)
    chars = sum(len(m.content) + sum(len(a) for _, a in m.tool_calls) for m in conv.messages)
    tool_texts = [m.content for m in conv.messages if m.role == "tool"]
    errors = sum(1 for text in tool_texts if _ERROR.search(text[-2000:]))
    submitted = conv.final_output is not None or any(
        _SUBMIT.search(name) for t in turns[-1:] for name, _ in t.action.tool_calls
    )
    passed = failed = 0.0
    for turn in reversed(turns):  # the last test run decides
        called = " ".join(f"{n} {a}" for n, a in turn.action.tool_calls)
        if _TEST_CALL.search(called):
            text = "\n".join(turn.observations)[-2000:]
            failed = float(bool(_FAILED.search(text)))
            passed = float(not failed and bool(_PASSED.search(text)))
            break
    return [
        math.log1p(len(turns)),
        math.log1p(chars),
        float(submitted),
        errors / max(len(tool_texts), 1),
        passed,
        failed,
    ]


# ----------------------------------------------------------------------------- design matrix


@dataclass(frozen=True)
class HashedTexts:
    """Hashed n-grams of a set of conversations: distinct (hash, row) pairs, sorted by row."""

    hashes: npt.NDArray[np.uint64]
    rows: Ints
    n_rows: int


def hash_conversations(convs: Sequence[Conversation], spec: SparseFeatures) -> HashedTexts:
    """Uni- and within-field bigram hashes of every conversation (one hasher pass)."""
    fields = [token_fields(c, spec) for c in convs]
    hashes, rows = NgramHasher().hash_turns(fields)
    return HashedTexts(hashes, rows, len(convs))


@dataclass(frozen=True)
class Design:
    """Sparse rows (bucket, ±1) plus standardised dense scalar columns."""

    rows: Ints
    cols: Ints
    signs: Floats
    dense: Floats
    """Shape (n, n_scalars); zero columns when the model uses no scalars."""
    n_buckets: int

    @property
    def n_rows(self) -> int:
        """Number of conversations."""
        return int(self.dense.shape[0])

    @property
    def n_weights(self) -> int:
        """Bias + dense columns + buckets."""
        return 1 + int(self.dense.shape[1]) + self.n_buckets

    def logits(self, w: Floats) -> Floats:
        """Xw for weights laid out [bias, dense…, buckets…]."""
        head = 1 + self.dense.shape[1]
        text = np.bincount(
            self.rows, weights=w[head + self.cols] * self.signs, minlength=self.n_rows
        )
        out: Floats = w[0] + self.dense @ w[1:head] + text
        return out

    def gradient(self, residual: Floats) -> Floats:
        """Xᵀ residual."""
        head = 1 + self.dense.shape[1]
        out = np.empty(self.n_weights)
        out[0] = residual.sum()
        out[1:head] = self.dense.T @ residual
        out[head:] = np.bincount(
            self.cols, weights=self.signs * residual[self.rows], minlength=self.n_buckets
        )
        return out


def design_for(texts: HashedTexts, dense: Floats, n_buckets: int, seed: int) -> Design:
    """The design of hashed texts under one hash seed (collisions differ between seeds)."""
    cols, signs = buckets(texts.hashes, n_buckets, seed)
    return Design(texts.rows, cols, signs, dense, n_buckets)


def sigmoid(z: Floats) -> Floats:
    """The logistic function (through tanh: no overflow)."""
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * z)), dtype=np.float64)


# ----------------------------------------------------------------------------- the model


@dataclass
class Member:
    """One fitted linear model of an ensemble: its hash seed and its non-zero weights."""

    seed: int
    bias: float
    dense: Floats
    bucket_index: Ints
    bucket_weight: Floats

    def weights(self, n_buckets: int) -> Floats:
        """The full weight vector [bias, dense…, buckets…]."""
        w = np.zeros(1 + len(self.dense) + n_buckets)
        w[0] = self.bias
        w[1 : 1 + len(self.dense)] = self.dense
        w[1 + len(self.dense) + self.bucket_index] = self.bucket_weight
        return w


@dataclass
class SparseValueModel:
    """P(success | conversation) from hashed text n-grams (and scalars): an average of the
    members' logits, divided by a temperature, through the logistic function."""

    features: SparseFeatures
    members: list[Member]
    scalar_mean: Floats
    scalar_scale: Floats
    temperature: float = 1.0
    info: dict[str, Any] = field(default_factory=dict)
    """How it was fitted (loss, l2, …): recorded, not used to score."""

    def dense_of(self, convs: Sequence[Conversation]) -> Floats:
        """Standardised scalar columns (shape (n, 0) when the model uses none)."""
        if not self.features.scalars:
            return np.zeros((len(convs), 0))
        raw = np.array([scalar_features(c) for c in convs], dtype=np.float64).reshape(
            len(convs), -1
        )
        return np.asarray((raw - self.scalar_mean) / self.scalar_scale, dtype=np.float64)

    def logits(self, convs: Sequence[Conversation], texts: HashedTexts | None = None) -> Floats:
        """The ensemble's raw logit per conversation, before the temperature."""
        if not convs:
            return np.zeros(0)
        texts = texts if texts is not None else hash_conversations(convs, self.features)
        dense = self.dense_of(convs)
        n = self.features.buckets
        total = np.zeros(len(convs))
        for m in self.members:
            total += design_for(texts, dense, n, m.seed).logits(m.weights(n))
        return total / len(self.members)

    def score_conversations(self, convs: Sequence[Conversation]) -> Floats:
        """P(success) of each conversation, in order."""
        return sigmoid(self.logits(convs) / self.temperature)

    def score(self, candidates: Iterable[Any]) -> Floats:
        """P(success) of candidates in any shape `trajlake.value.serialize` accepts."""
        return self.score_conversations([as_conversation(c) for c in candidates])

    def score_lake(self, lake: LakeStore, snapshot_id: int, ids: Sequence[str]) -> Floats:
        """P(success) of lake trajectories at a snapshot, in the order of `ids`."""
        from trajlake.value.conversations import read_conversations

        convs = read_conversations(lake, snapshot_id, ids)
        missing = [i for i in ids if i not in convs]
        if missing:
            raise NoSuchTrajectory(
                f"{len(missing)} trajectories are not in the lake at snapshot {snapshot_id} "
                f"(first: {missing[0]!r})"
            )
        return self.score_conversations([convs[i] for i in ids])

    # ------------------------------------------------------------------------ files

    def save(self, directory: str | Path) -> None:
        """Write `SPARSE_FILE` (settings, JSON) and `WEIGHTS_FILE` (arrays, npz) into a folder."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, npt.NDArray[Any]] = {
            "scalar_mean": self.scalar_mean,
            "scalar_scale": self.scalar_scale,
        }
        for i, m in enumerate(self.members):
            arrays[f"m{i}_dense"] = m.dense
            arrays[f"m{i}_index"] = m.bucket_index
            arrays[f"m{i}_weight"] = m.bucket_weight
        with (out / WEIGHTS_FILE).open("wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]
        meta = {
            "format": FORMAT,
            "features": {**asdict(self.features), "fields": list(self.features.fields)},
            "members": [{"seed": m.seed, "bias": m.bias} for m in self.members],
            "temperature": self.temperature,
            "info": self.info,
        }
        (out / SPARSE_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, directory: str | Path) -> SparseValueModel:
        """Read a model written by `save` (npz without pickles)."""
        path = Path(directory)
        try:
            meta = json.loads((path / SPARSE_FILE).read_text())
        except (OSError, ValueError) as e:
            raise ModelFormatError(f"{path}: unreadable {SPARSE_FILE}: {e}") from e
        if meta.get("format") != FORMAT:
            raise ModelFormatError(
                f"{path}: sparse model format {meta.get('format')!r}, this version reads "
                f"{FORMAT!r}: retrain it with `trajlake train value`"
            )
        spec = dict(meta["features"])
        features = SparseFeatures(**{**spec, "fields": tuple(spec["fields"])})
        with np.load(path / WEIGHTS_FILE, allow_pickle=False) as arrays:
            members = [
                Member(
                    seed=int(m["seed"]),
                    bias=float(m["bias"]),
                    dense=np.asarray(arrays[f"m{i}_dense"], dtype=np.float64),
                    bucket_index=np.asarray(arrays[f"m{i}_index"], dtype=np.int64),
                    bucket_weight=np.asarray(arrays[f"m{i}_weight"], dtype=np.float64),
                )
                for i, m in enumerate(meta["members"])
            ]
            mean = np.asarray(arrays["scalar_mean"], dtype=np.float64)
            scale = np.asarray(arrays["scalar_scale"], dtype=np.float64)
        return cls(features, members, mean, scale, float(meta["temperature"]), meta["info"])
