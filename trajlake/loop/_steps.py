"""The loop's steps through the public paths: synthetic rollouts → JSONL → ingest → labels → tag;
credit runs; SFT exports read back into behaviour-cloning examples; the value model recipes (tiny
transformer, feature baseline); the gen-1 policy registered in `models`; best-of-N selection
annotated on gen-1 rollouts.

Each step is a plain function over a `Lake` so `_run` reads as the loop itself and a test can
drive one step alone; nothing here imports torch (the value model is trained in `_run`).
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajlake._names import check_name
from trajlake.credit import run_credit
from trajlake.records import rows_for_table
from trajlake.synth import PolicyParams, SynthBatch, synth_turns

if TYPE_CHECKING:
    from trajlake.api import Lake
    from trajlake.lake import SnapshotRef
    from trajlake.value.recipe import Recipe

_OUTCOME_FIELDS = ("resolved", "reward", "outcome_source")


# --------------------------------------------------------------------------- generations


def without_outcomes(batch: SynthBatch) -> SynthBatch:
    """The batch with its rollouts' own outcomes removed: they arrive later, as labels."""
    stripped = [
        {k: v for k, v in t.items() if k not in _OUTCOME_FIELDS} for t in batch.trajectories
    ]
    return replace(batch, trajectories=stripped)


def write_labels(batch: SynthBatch, path: Path) -> None:
    """The verifier's outcomes as a labels JSONL (trajectory id → resolved, reward)."""
    with path.open("w", encoding="utf-8") as f:
        for truth in batch.truth:
            success = bool(truth["success"])
            row = {"trajectory_id": truth["trajectory_id"], "resolved": success}
            f.write(json.dumps({**row, "reward": 1.0 if success else 0.0}) + "\n")


def land_generation(
    lake: Lake, batch: SynthBatch, directory: Path, *, generation: int, tag: str, note: str
) -> dict[str, Any]:
    """Write a generation as JSONL without outcomes, ingest it, attach its labels, tag it.

    `batch` holds the rollouts to store (outcomes already removed) and the ground truth the
    labels are written from.
    """
    directory.mkdir(parents=True, exist_ok=True)
    rollouts, labels = directory / f"{tag}.jsonl", directory / f"{tag}-labels.jsonl"
    batch.write_jsonl(rollouts)
    write_labels(batch, labels)
    ingest = lake.ingest(rollouts, generation=generation, strict=True)
    label = lake.label(labels, format="jsonl")
    snapshot = lake.tag(tag, at=label.snapshot_id, note=note).snapshot_id
    return {
        "rollouts_file": str(rollouts),
        "labels_file": str(labels),
        "ingested": ingest.added,
        "duplicates": ingest.duplicates,
        "quarantined": ingest.quarantined,
        "labels_added": label.added,
        "labels_matched": label.matched,
        "labels_resolved": label.resolved,
        "tag": tag,
        "snapshot": snapshot,
    }


# --------------------------------------------------------------------------- credit


@dataclass(frozen=True)
class CreditSpec:
    """One credit run of the loop."""

    name: str
    estimator: str
    mask: str
    params: dict[str, Any] = field(default_factory=dict)


CREDIT_RUNS: tuple[CreditSpec, ...] = (
    # With outcome values every TD credit is 0 < ε, so `rise` keeps exactly the turns of
    # resolved trajectories: rejection sampling, expressed as a credit run.
    CreditSpec("outcome-rise", "outcome", "rise"),
    CreditSpec("prefix-mc-rise", "prefix-mc", "rise"),
    # Advantage weights clip(exp(A/β), 0, w_max) with A = R − V(s_t) (GAE λ = 1).
    CreditSpec("prefix-mc-advantage", "prefix-mc", "advantage", {"lam": 1.0}),
    CreditSpec("value-model-rise", "value-model:builtin", "rise"),
    # The best CPU source on held-out tasks (docs/credit.md): cross-fitted by task, so no
    # turn is valued by a model that saw its task; it reads the observations from the lake.
    CreditSpec("crossfit-td-rise", "crossfit:text-td", "rise"),
)


def compute_credit(lake: Lake, *, at: SnapshotRef) -> list[dict[str, Any]]:
    """Run every `CREDIT_RUNS` entry on the snapshot `at`; one summary per run."""
    out = []
    for spec in CREDIT_RUNS:
        report = run_credit(
            lake, estimator=spec.estimator, mask=spec.mask, at=at, name=spec.name, **spec.params
        )
        out.append(
            {
                "run_name": report.run_name,
                "estimator": report.estimator,
                "mask": spec.mask,
                "source_snapshot": report.source_snapshot,
                "snapshot": report.snapshot,
                "trajectories": report.trajectories,
                "turns": report.turns,
                "kept_turns": report.kept_turns,
            }
        )
    return out


# ------------------------------------------------------------------ SFT → behaviour cloning


@dataclass(frozen=True)
class Variant:
    """A way to pick the gen-0 turns the next policy is cloned from."""

    key: str
    label: str
    training_data: str
    credit_run: str | None


VARIANTS: tuple[Variant, ...] = (
    Variant(
        "resolved-only",
        "resolved only (rejection sampling)",
        "every turn of resolved trajectories, weight 1",
        "outcome-rise",
    ),
    Variant("all", "all trajectories", "every turn, weight 1", None),
    Variant(
        "credit-rise-pmc",
        "credit-weighted: rise (prefix-mc)",
        "resolved trajectories + rising segments of failed ones (Orchard)",
        "prefix-mc-rise",
    ),
    Variant(
        "credit-advantage-pmc",
        "credit-weighted: advantage (prefix-mc)",
        "every turn, weight clip(exp(R − V(s_t)), 0, 5)",
        "prefix-mc-advantage",
    ),
    Variant(
        "credit-rise-vm",
        "credit-weighted: rise (value model)",
        "resolved trajectories + rising segments by a fitted prefix model",
        "value-model-rise",
    ),
    Variant(
        "credit-rise-best",
        "credit-weighted: rise (cross-fitted text)",
        "resolved trajectories + rising segments by a text model fitted on other tasks",
        "crossfit-td-rise",
    ),
)
GEN1_VARIANT = "credit-rise-vm"
"""The policy gen-1 runs, chosen by held-out success over 8 seeds (`trajlake demo --seeds 0-7`,
README): rise segments by the built-in value model beat those by the cross-fitted text model
(`credit-rise-best`, the best source by rank correlation with true credit) on 7 of 8 seeds,
by +0.009 (95% CI +0.001 to +0.018), and both beat rejection sampling."""


def synth_turns_by_trajectory(
    lake: Lake, *, at: SnapshotRef, generation: int
) -> dict[str, list[tuple[str, str]]]:
    """(observation, action) of each assistant message of the main thread, per trajectory,
    in message order, from the lake's `messages.attrs.synth`."""
    rows = lake.sql(
        "SELECT m.trajectory_id, m.attrs FROM messages m JOIN trajectories t "
        "USING (trajectory_id) WHERE m.role = 'assistant' AND m.thread = 'main' "
        f"AND t.generation = {int(generation)} ORDER BY m.trajectory_id, m.idx",
        at=at,
    ).rows()
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for trajectory_id, attrs in rows:
        out[trajectory_id].extend(synth_turns([{"role": "assistant", "attrs": attrs}]))
    return dict(out)


def read_weighted_turns(
    folder: Path, turns: Mapping[str, Sequence[tuple[str, str]]]
) -> list[tuple[str, str, float]]:
    """Behaviour-cloning examples (observation, action, weight > 0) from a `trl` SFT export.

    The export's chat messages carry no `attrs` (it writes what trainers read), so each row's
    assistant messages are matched, by trajectory id and assistant index, to the lake's messages
    and their `attrs.synth` (observation, action).
    """
    examples: list[tuple[str, str, float]] = []
    for shard in sorted(folder.glob("*-[0-9][0-9][0-9][0-9][0-9].jsonl")):
        with shard.open(encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                pairs = zip(row["messages"], row["message_weights"], strict=True)
                weights = [float(w) for m, w in pairs if m["role"] == "assistant"]
                known = turns.get(row["trajectory_id"], [])
                if len(known) != len(weights):
                    raise ValueError(
                        f"export row {row['trajectory_id']!r} has {len(weights)} assistant "
                        f"messages, the lake {len(known)}: the export is not of this generation"
                    )
                examples += [(o, a, w) for (o, a), w in zip(known, weights, strict=True) if w > 0]
    return examples


def export_variant(
    lake: Lake, variant: Variant, out: Path, *, at: SnapshotRef
) -> tuple[dict[str, Any], Path]:
    """Export gen-0 as a `trl` SFT dataset weighted by the variant's credit run."""
    folder = out / variant.key
    report = lake.export_sft(
        str(folder),
        format="trl",
        at=at,
        where="generation = 0",
        credit=variant.credit_run,
        # Rejection and rise masks leave failed rollouts without trained turns: left out, counted.
    )
    train = report.splits["train"]
    info = {
        "variant": variant.key,
        "credit_run": variant.credit_run,
        "path": str(folder),
        "export_id": report.export_id,
        "snapshot": report.snapshot_id,
        "samples": train.samples,
        "turns": train.turns,
        "trained_turns": train.trained_turns,
    }
    return info, folder


# ------------------------------------------------------------------------ the value model recipes

_TINY_RECIPE: dict[str, Any] = {
    "name": "tiny-value",
    "kind": "value",
    "description": "Tiny BERT-style encoder with a mean-pooled scalar head, pointwise BCE.",
    "backbone": {
        "config": {
            "model_type": "bert",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 128,
            "max_position_embeddings": 512,
            "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.1,
        },
        "pooling": "mean",
        "tokenizer": {"train_vocab_size": 2000, "train_kind": "wordpiece"},
    },
    "serializer": {"kind": "whole", "max_tokens": 512, "observation_max_tokens": 48},
    "data": {"val_frac": 0.15, "test_frac": 0.3, "split_seed": 0},
    "train": {
        "epochs": 6,
        "batch_size": 16,
        "lr": 0.001,
        "warmup_ratio": 0.1,
        "weight_decay": 0.01,
        "loss": "bce",
        "early_stopping_patience": 2,
        "seed": 0,
    },
}
"""`models/tiny.yaml` as data: an installed package has no `models/` folder."""

_BASELINE_RECIPE: dict[str, Any] = {
    "name": "feature-baseline",
    "kind": "baseline",
    "description": "Logistic regression on trajectory features read with SQL.",
    "baseline": {"l2": 1.0, "top_n": 5},
    "data": {"val_frac": 0.15, "test_frac": 0.3, "split_seed": 0},
}
"""`models/baseline.yaml` as data: the value model of an install without torch."""

_HYBRID_RECIPE: dict[str, Any] = {
    "name": "hybrid",
    "kind": "sparse",
    "description": (
        "Text n-grams + trajectory scalars, pairwise, val-picked l2, temperature, 3 seeds."
    ),
    "sparse": {
        "fields": ["actions", "observations", "issue", "final", "recent"],
        "buckets": 262144,
        "recent_turns": 3,
        "scalars": True,
        "l2": 1.0,
        "l2_grid": [0.3, 1.0, 3.0],
        "loss": "pairwise",
        "pointwise_weight": 0.1,
        "class_weight": True,
        "temperature": True,
        "ensemble": 3,
    },
    "data": {"val_frac": 0.15, "test_frac": 0.3, "split_seed": 0},
}
"""`models/hybrid.yaml` as data: the best CPU recipe, the demo's value model by default."""

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
TINY_RECIPE_FILE = MODELS_DIR / "tiny.yaml"
BASELINE_RECIPE_FILE = MODELS_DIR / "baseline.yaml"
HYBRID_RECIPE_FILE = MODELS_DIR / "hybrid.yaml"


def tiny_recipe(overrides: Mapping[str, Any]) -> Recipe:
    """The tiny recipe (`models/tiny.yaml` when present, else the same recipe embedded here)
    with dotted `overrides` such as ``{"train.epochs": 1}``."""
    return _packaged_recipe(TINY_RECIPE_FILE, _TINY_RECIPE, overrides)


def baseline_recipe() -> Recipe:
    """The feature baseline (`models/baseline.yaml` when present, else embedded here)."""
    return _packaged_recipe(BASELINE_RECIPE_FILE, _BASELINE_RECIPE, {})


def hybrid_recipe() -> Recipe:
    """The hybrid sparse text recipe (`models/hybrid.yaml` when present, else embedded here)."""
    return _packaged_recipe(HYBRID_RECIPE_FILE, _HYBRID_RECIPE, {})


def _packaged_recipe(file: Path, data: Mapping[str, Any], overrides: Mapping[str, Any]) -> Recipe:
    # A source checkout reads the YAML a user can edit; an installed package has no models/
    # folder and uses the copy embedded here (a test keeps the two equal).
    from trajlake.value.recipe import load_recipe, parse_recipe

    if file.is_file():
        return load_recipe(file, overrides=dict(overrides))
    tree = copy.deepcopy(dict(data))
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        node = tree
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return parse_recipe(tree, source=f"trajlake.loop (models/{file.name})")


# --------------------------------------------------------------------------- gen-1


def register_policy(
    lake: Lake,
    policy: PolicyParams,
    *,
    path: Path,
    training_snapshot: int,
    training_tag: str,
    config: dict[str, Any],
    metrics: dict[str, Any],
) -> str:
    """Save the policy's logits to `path` and add it to `models` (kind `policy`); its id."""
    text = json.dumps(policy.to_dict(), indent=2, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    model_id = check_name("model id", f"{policy.name}-s{training_snapshot}-{digest}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")
    row = {
        "model_id": model_id,
        "name": policy.name,
        "kind": "policy",
        "base_model": PolicyParams.default().name,
        "training_snapshot": training_snapshot,
        "training_tag": training_tag,
        "selection_sql": "generation = 0",
        "label_source": "outcomes",
        "metrics": metrics,
        "artifact_uri": str(path.resolve()),
        "config": config,
        "created_at": dt.datetime.now(dt.UTC),
    }
    summary = {"model_id": model_id, "kind": "policy"}
    lake.commit(
        {"models": rows_for_table("models", [row])}, operation="register-model", summary=summary
    )
    return model_id


def candidates_by_task(batch: SynthBatch) -> dict[str, list[int]]:
    """Indices of the batch's rollouts per task, in batch order: the N candidates of a task."""
    by_task: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(batch.trajectories):
        by_task[str(t["task_id"])].append(i)
    return dict(by_task)


def select_best_of_n(
    batch: SynthBatch, scores: Sequence[float], *, lineage: Mapping[str, str]
) -> SynthBatch:
    """Rank each task's candidates by the value model's `scores` (one per rollout, in batch
    order) and record, on every rollout, its lineage and its place:
    ``attrs.best_of_n = {n, score, rank, selected}`` (rank 1 is picked; ties keep batch order).

    The scores must come from candidates without outcomes: what the model sees at inference.
    """
    if len(scores) != len(batch.trajectories):
        raise ValueError(f"{len(scores)} scores for {len(batch.trajectories)} candidates")
    marked = [dict(t) for t in batch.trajectories]
    for indices in candidates_by_task(batch).values():
        ranked = sorted(indices, key=lambda i: (-scores[i], i))
        for place, i in enumerate(ranked, start=1):
            choice = {
                "n": len(indices),
                "score": float(scores[i]),
                "rank": place,
                "selected": place == 1,
            }
            attrs = {**marked[i]["attrs"], "lineage": dict(lineage), "best_of_n": choice}
            marked[i]["attrs"] = attrs
    return replace(batch, trajectories=marked)
