"""`hindsight:<model>` / `hindsight:fit` — values from how much more likely a causal LM finds
each turn once the outcome is known (HCAPO / implicit-PRM style).

Δ_t = log p(x_t | outcome = success, h_t) − log p(x_t | outcome = failure, h_t), with the
outcome given as a short prefix string and x_t the turn's action (`score="action"`) or its
action and observation (`score="turn"`, the default). By Bayes' rule, under an LM that models
trajectories given outcomes, Σ_{u<t} Δ_u is the change of the log-odds of success from s_0 to
s_t, so V(s_t) = σ(logit p_0 + β Σ_{u<t} Δ_u) (β = 1: the LM's posterior; a small LM is far
from calibrated, and the default β = 0.01 was chosen on a tuning seed), p_0 the labelled
success rate, and V(s_T) the known outcome. `hindsight:fit` (or `fit=True` with a model)
fine-tunes an LM per task fold on the other folds' turns, so no value comes from a model that
saw its task.

It lives with the value models, not in credit, because it needs torch and transformers (and a
locally trained tokenizer from `value`); it joins credit's registry as the `hindsight:` entry
point (`SPEC` below, named in pyproject.toml), so credit never imports it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from trajlake.credit._folds import task_folds, task_key
from trajlake.credit._text_features import Key, Observation, read_observations
from trajlake.credit._types import TrajectoryTurns, ValueSource
from trajlake.credit.registry import ValueSourceSpec
from trajlake.errors import TrajlakeError

if TYPE_CHECKING:
    from trajlake.lake import LakeStore, SnapshotRef
    from trajlake.value._hindsight_lm import CausalLM, Segments, Unit

log = logging.getLogger(__name__)

SUCCESS_TEXT = "Outcome: the task was solved."
FAILURE_TEXT = "Outcome: the task was not solved."


def _logit(p: float) -> float:
    p = min(max(p, 1e-3), 1 - 1e-3)
    return math.log(p / (1 - p))


def values_from_deltas(deltas: Sequence[float], prior: float, beta: float) -> list[float]:
    """V(s_0) … V(s_T): σ(logit prior + β Σ_{u<t} Δ_u) (the last one replaced by the outcome
    when it is known, by the caller)."""
    base = _logit(prior)
    z = base + beta * np.concatenate([[0.0], np.cumsum(np.asarray(deltas, dtype=np.float64))])
    return [float(v) for v in 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))]


class HindsightValues:
    """Hindsight log-likelihood-ratio values from a causal LM (zero-shot or cross-fitted).

    Args:
        model: A `transformers` causal LM name or directory (loaded with `from_pretrained`);
            None with `fit=True` builds a small GPT-2 from a config per fold.
        fit: Fine-tune per task fold on the other folds (K = `folds`, tasks dealt by `seed`).
        success_text, failure_text: The hindsight prefixes (outcome strings).
        score: "turn" scores the action and its observation, "action" the action alone.
        beta: Scale of the summed log-ratios (1: the LM's own posterior log-odds; 0.01 by
            default, where a small fine-tuned LM's sums would otherwise saturate V at 0 or 1).
        max_tokens: Token budget of history + scored turn (the history is cut from the left).
        segment_tokens: Tokens kept per action (its first) and per observation (both ends).
        batch_size: Scored turns per forward pass.
        reuse_prefix: Encode the outcome prefix once and reuse its cache in every batch.
        device: Torch device ("cpu" by default).
        steps, tune_batch, lr, vocab_size, n_embd, n_layer, n_head: Fine-tuning (`fit`): steps
            of AdamW, examples per step, learning rate, and the tokenizer / GPT-2 size used
            when no model is given.
        lake, at, observations: Where the turns' observations come from (see `crossfit`).
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        fit: bool = False,
        folds: int = 5,
        seed: int = 0,
        success_text: str = SUCCESS_TEXT,
        failure_text: str = FAILURE_TEXT,
        score: Literal["turn", "action"] = "turn",
        beta: float = 0.01,
        max_tokens: int = 128,
        segment_tokens: int = 32,
        batch_size: int = 32,
        reuse_prefix: bool = True,
        device: str = "cpu",
        steps: int = 300,
        tune_batch: int = 16,
        lr: float = 1e-3,
        vocab_size: int = 2000,
        n_embd: int = 64,
        n_layer: int = 2,
        n_head: int = 2,
        lake: LakeStore | None = None,
        at: SnapshotRef = None,
        observations: Mapping[Key, Observation] | None = None,
    ) -> None:
        if model is None and not fit:
            raise ValueError("hindsight needs a model name or directory, or fit=True")
        if score not in ("turn", "action"):
            raise ValueError(f"score must be 'turn' or 'action', got {score!r}")
        if fit and folds < 2:
            raise ValueError(f"folds must be >= 2 (values are out of fold), got {folds}")
        if success_text == failure_text:
            raise ValueError("success_text and failure_text must differ")
        if max_tokens < 8 or segment_tokens < 2 or batch_size < 1 or steps < 1 or tune_batch < 1:
            raise ValueError(
                "max_tokens must be >= 8, segment_tokens >= 2, batch_size, steps, tune_batch >= 1"
            )
        self.model, self.fit, self.folds, self.seed = model, bool(fit), folds, seed
        self.name = "hindsight:fit" if model is None else f"hindsight:{model}"
        self.success_text, self.failure_text, self.score = success_text, failure_text, score
        self.beta, self.max_tokens, self.segment_tokens = float(beta), max_tokens, segment_tokens
        self.batch_size, self.reuse_prefix, self.device = batch_size, bool(reuse_prefix), device
        self.steps, self.tune_batch, self.lr = steps, tune_batch, float(lr)
        self.vocab_size, self.shape = vocab_size, (n_embd, n_layer, n_head)
        self.lake, self.at, self.observations = lake, at, observations
        self.deltas: dict[str, list[float]] = {}
        self.fold_of_task: dict[str, int] = {}
        self.train_tasks: list[set[str]] = []
        self.train_loss: list[float] = []
        self.seconds: dict[str, float] = {}

    def values(self, trajectories: Sequence[TrajectoryTurns]) -> dict[str, list[float]]:
        """V(s_0) … V(s_T) of every trajectory (labelled ones end with their outcome)."""
        trajs = [t for t in trajectories if t.turns or t.outcome is not None]
        labelled = [t for t in trajs if t.outcome is not None]
        if not labelled:
            raise TrajlakeError(f"{self.name}: no labelled trajectories (label some first)")
        obs = self._observations(trajs)
        self.seconds = {}
        if self.fit:
            priors = self._fit_and_score(trajs, obs)
        else:
            lm = self._load()
            self.deltas = self._deltas(lm, self._segments(lm.tokenizer, trajs, obs), trajs)
            rate = float(np.mean([float(t.outcome) for t in labelled]))  # type: ignore[arg-type]
            priors = {t.trajectory_id: rate for t in trajs}
        out: dict[str, list[float]] = {}
        for t in trajs:
            curve = values_from_deltas(
                self.deltas[t.trajectory_id], priors[t.trajectory_id], self.beta
            )
            if t.outcome is not None:
                curve[-1] = float(t.outcome)
            out[t.trajectory_id] = curve
        log.info("%s: %d trajectories valued; seconds %s", self.name, len(out), self.seconds)
        return out

    # -- pieces ---------------------------------------------------------------------------

    def _observations(self, trajs: Sequence[TrajectoryTurns]) -> Mapping[Key, Observation]:
        if self.observations is not None:
            return self.observations
        if self.lake is None:
            log.info("%s: no lake given, observations are not read (actions only)", self.name)
            return {}
        return read_observations(self.lake, self.at, trajs)

    def _load(self) -> CausalLM:
        from trajlake.value._hindsight_lm import load_causal_lm

        assert self.model is not None
        return load_causal_lm(self.model, self.device)

    def _segments(
        self, tokenizer: Any, trajs: Sequence[TrajectoryTurns], obs: Mapping[Key, Observation]
    ) -> list[Segments]:
        from trajlake.value._hindsight_lm import segments

        return segments(tokenizer, trajs, obs, self.segment_tokens)

    def _budget(self, lm: CausalLM, ok: Sequence[int], bad: Sequence[int]) -> int:
        """`max_tokens`, cut to what the model's positions allow after the longer prefix."""
        from trajlake.value._hindsight_lm import position_limit

        limit = position_limit(lm)
        room = None if limit is None else limit - max(len(ok), len(bad))
        if room is not None and room < self.max_tokens:
            log.info(
                "%s: max_tokens cut to %d (the model has %d positions)", self.name, room, limit
            )
            return room
        return self.max_tokens

    def _units(self, segs: Sequence[Segments], budget: int) -> list[Unit]:
        from trajlake.value._hindsight_lm import units

        if budget < 2:
            raise TrajlakeError(f"{self.name}: the model has no room for history and a turn")
        return units(segs, budget=budget, include_observation=self.score == "turn")

    def prefixes(self, tokenizer: Any) -> tuple[list[int], list[int]]:
        """Token ids of the success and failure prefixes (with the tokenizer's specials)."""
        ok = list(tokenizer(self.success_text + "\n")["input_ids"])
        bad = list(tokenizer(self.failure_text + "\n")["input_ids"])
        if ok == bad:
            raise ValueError(f"{self.name}: success_text and failure_text tokenize the same")
        return ok, bad

    def _deltas(
        self, lm: CausalLM, segs: Sequence[Segments], trajs: Sequence[TrajectoryTurns]
    ) -> dict[str, list[float]]:
        from trajlake.value._hindsight_lm import score

        ok, bad = self.prefixes(lm.tokenizer)
        todo = self._units(segs, self._budget(lm, ok, bad))
        t0 = time.perf_counter()
        good = score(lm, ok, todo, batch_size=self.batch_size, reuse_prefix=self.reuse_prefix)
        poor = score(lm, bad, todo, batch_size=self.batch_size, reuse_prefix=self.reuse_prefix)
        self.seconds["score"] = self.seconds.get("score", 0.0) + time.perf_counter() - t0
        out: dict[str, list[float]] = {t.trajectory_id: [] for t in trajs}
        for unit, g, p in zip(todo, good, poor, strict=True):
            out[trajs[unit.index].trajectory_id].append(g - p)
        return out

    def assign_folds(self, trajs: Sequence[TrajectoryTurns]) -> dict[str, int]:
        """Fold of every task (`task_folds`: labelled tasks shuffled by `seed`, round-robin)."""
        return task_folds(
            trajs,
            folds=self.folds,
            seed=self.seed,
            name=self.name,
            remedy="label more tasks, or use a pretrained model without fit",
        )

    def _tokenizer(self, trajs: Sequence[TrajectoryTurns], obs: Mapping[Key, Observation]) -> Any:
        """The model's tokenizer, or a WordPiece vocabulary built from the transcripts' text
        (no outcomes are read, so building it on every fold's text leaks nothing)."""
        if self.model is not None:
            return self._load().tokenizer
        from trajlake.value._neural_tokenizers import train_tokenizer

        texts = [self.success_text, self.failure_text]
        for t in trajs:
            for turn in t.turns:
                texts.append(turn.action_text)
                seen = obs.get((t.trajectory_id, t.thread, turn.turn))
                if seen is not None:
                    texts.append(seen.text)
        return train_tokenizer(texts, vocab_size=self.vocab_size, kind="wordpiece")

    def _fit_and_score(
        self, trajs: Sequence[TrajectoryTurns], obs: Mapping[Key, Observation]
    ) -> dict[str, float]:
        """Fine-tune one LM per fold on the other folds, score the fold; priors per trajectory."""
        from trajlake.value._hindsight_lm import TuneConfig, fine_tune, tiny_lm

        fold = self.fold_of_task = self.assign_folds(trajs)
        tokenizer = self._tokenizer(trajs, obs)
        segs = self._segments(tokenizer, trajs, obs)
        ok, bad = self.prefixes(tokenizer)
        base = None if self.model is None else self._load()
        todo = self._units(segs, self.max_tokens if base is None else self._budget(base, ok, bad))
        n_embd, n_layer, n_head = self.shape
        self.deltas, self.train_tasks, self.train_loss = {}, [], []
        priors: dict[str, float] = {}
        for f in range(max(fold.values()) + 1):
            train = [
                i for i, t in enumerate(trajs) if t.outcome is not None and fold[task_key(t)] != f
            ]
            held = [i for i, t in enumerate(trajs) if fold[task_key(t)] == f]
            self.train_tasks.append({task_key(trajs[i]) for i in train})
            if not held:
                continue
            outcome = {i: float(trajs[i].outcome) >= 0.5 for i in train}  # type: ignore[arg-type]
            examples = [(ok if outcome[u.index] else bad, u) for u in todo if u.index in outcome]
            config = TuneConfig(
                self.steps, self.tune_batch, self.lr, self.seed + f, n_embd, n_layer, n_head
            )
            t0 = time.perf_counter()
            if self.model is None:
                lm = tiny_lm(tokenizer, self.max_tokens + len(ok) + len(bad), config, self.device)
            else:
                lm = self._load()
            self.train_loss.append(fine_tune(lm, examples, config))
            self.seconds["fit"] = self.seconds.get("fit", 0.0) + time.perf_counter() - t0
            sub = [trajs[i] for i in held]
            self.deltas.update(self._deltas(lm, [segs[i] for i in held], sub))
            rate = float(np.mean([float(outcome[i]) for i in train])) if train else 0.5
            priors.update({t.trajectory_id: rate for t in sub})
        return priors


def _build(name: str, **kw: Any) -> ValueSource:
    """`hindsight:<model name|dir>`, or `hindsight:` / `hindsight:fit` (a tiny LM per fold)."""
    target = name.removeprefix("hindsight:")
    if target in ("", "fit"):
        return HindsightValues(None, fit=True, **kw)
    return HindsightValues(target, **kw)


SPEC = ValueSourceSpec(
    "hindsight:", _build, usage="hindsight:<model name|model dir|fit>", reads_observations=True
)
"""The `hindsight:` family in credit's registry (the `trajlake.value_sources` entry point)."""
