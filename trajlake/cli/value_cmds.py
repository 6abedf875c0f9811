"""Value-model commands: `train value`, `eval value`, `score`, `rerank` and `serve`.

Every value import sits inside its command: torch and transformers are an optional extra, so
`trajlake --help` and the lake commands must work without them, and only the command that trains
or scores pays for loading them. `--set` values are parsed as YAML, like the recipe file they
override.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import yaml

from trajlake.cli.engine_options import engine_options, ray_options_of
from trajlake.cli.options import LakeSpec, at_option, lake_options, output_option
from trajlake.cli.output import dumps
from trajlake.cli.progress import progress_for
from trajlake.cli.proxy_cmd import LIMIT_HELP, parse_limits

if TYPE_CHECKING:
    from trajlake.serve import ServerLimits

MODEL_ARG = click.argument("model", type=click.Path(exists=True, file_okay=False))
WHERE_OPTION = click.option(
    "--where",
    default=None,
    metavar="SQL",
    help="SQL predicate over trajectories (alias t), e.g. \"t.harness = 'swe-agent'\".",
)


def _overrides(pairs: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="'--set'")
        # YAML, as in the recipe file: `train.epochs=1` overrides with an int, not the text "1".
        out[key.strip()] = yaml.safe_load(value)
    return out


def _metrics_lines(metrics: dict[str, Any]) -> list[str]:
    lines = []
    for key, value in metrics.items():
        shown = "n/a" if value is None else f"{value:.4f}" if isinstance(value, float) else value
        lines.append(f"  {key:<24} {shown}")
    return lines


@click.group("train")
def train_group() -> None:
    """Train models from the lake."""


@train_group.command("value")
@lake_options
@click.option(
    "--config",
    "config",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Recipe YAML (see models/), e.g. models/tiny.yaml.",
)
@at_option
@WHERE_OPTION
@click.option(
    "--out",
    default=None,
    help="Model directory (default: <lake>/models/<model id>); elsewhere inside the lake is "
    "refused.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a recipe field, e.g. --set train.epochs=1 (repeatable).",
)
@click.option(
    "--no-register", is_flag=True, help="Do not add the model to the lake's models table."
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue an interrupted run from its latest checkpoint (same recipe and data).",
)
@output_option()
def train_value(
    lake: LakeSpec,
    config: str,
    at: str | None,
    where: str | None,
    out: str | None,
    overrides: tuple[str, ...],
    no_register: bool,
    resume: bool,
    output: str,
) -> None:
    """Train a value model (or the feature baseline) on labelled trajectories.

    Examples are split by task; the held-out test tasks are scored at the end and the report,
    the model card (with lineage) and the weights are written to the model directory.
    """
    from trajlake.value.recipe import load_recipe
    from trajlake.value.train import headline_metrics, train_value_model

    recipe = load_recipe(config, overrides=_overrides(overrides))
    trained = train_value_model(
        lake.open(),
        recipe,
        at=at,
        where=where,
        out=out,
        register=not no_register,
        progress=progress_for("items"),
        resume=resume,
    )
    if trained.card is None:  # a non-main process of a multi-GPU run: rank 0 reports
        return
    metrics = headline_metrics(trained.report)
    if output == "json":
        click.echo(
            dumps(
                {
                    "model_id": trained.model_id,
                    "directory": str(trained.directory),
                    "registered_snapshot": trained.registered_snapshot,
                    "metrics": metrics,
                }
            )
        )
        return
    click.echo(f"model {trained.model_id} ({recipe.kind}) saved to {trained.directory}")
    if trained.registered_snapshot is not None:
        click.echo(f"registered in models at snapshot {trained.registered_snapshot}")
    click.echo("held-out test tasks:")
    for line in _metrics_lines(metrics):
        click.echo(line)


@click.group("eval")
def eval_group() -> None:
    """Evaluate models on lake trajectories."""


@eval_group.command("value")
@MODEL_ARG
@lake_options
@at_option
@WHERE_OPTION
@click.option(
    "--split",
    type=click.Choice(["test", "all"]),
    default="test",
    show_default=True,
    help="test: the tasks the model card held out; all: every selected trajectory.",
)
@click.option("--out", default=None, help="Report directory (default: inside the model dir).")
@click.option("--n-boot", default=1000, show_default=True, help="Bootstrap resamples of tasks.")
@click.option(
    "--no-floors",
    is_flag=True,
    help="Skip the floors (sparse text model on the card's training split, fewer steps, "
    "exit status) reported beside the model.",
)
@output_option()
def eval_value(
    model: str,
    lake: LakeSpec,
    at: str | None,
    where: str | None,
    split: str,
    out: str | None,
    n_boot: int,
    no_floors: bool,
    output: str,
) -> None:
    """Evaluate MODEL: Best@k, Random@k, Pass@k, gap closed, AUROC, ECE, Brier, with CIs."""
    from trajlake.value.artifacts import load_model
    from trajlake.value.evaluate import evaluate_saved_model
    from trajlake.value.train import headline_metrics

    saved = load_model(model)
    evaluation = evaluate_saved_model(
        lake.open(),
        saved,
        at=at,
        where=where,
        split="all" if split == "all" else "test",
        out=out,
        n_boot=n_boot,
        floors=not no_floors,
    )
    if output == "json":
        click.echo(dumps(evaluation.report))
        return
    click.echo(f"{saved.model_id} on {evaluation.report.get('n_examples')} trajectories")
    for line in _metrics_lines(headline_metrics(evaluation.report)):
        click.echo(line)
    for line in _floor_lines(evaluation.report):
        click.echo(line)
    seen = evaluation.report["extra"].get("tasks_seen_in_training")
    if seen:
        click.echo(f"warning: {seen} evaluated tasks were in the model's training split")
    for kind, path in evaluation.files.items():
        click.echo(f"{kind}: {path}")


def _interval(point: float | None, ci: dict[str, float] | None) -> str:
    if point is None:
        return "n/a"
    return f"{point:.3f}" + (f" [{ci['low']:.3f}, {ci['high']:.3f}]" if ci else "")


def _floor_lines(report: dict[str, Any]) -> list[str]:
    """The model and each floor on the same candidates: Best@n, gap closed, AUROC with CIs."""
    floors = report.get("floors") or {}
    if not floors:
        return []
    n = report["k_max"]
    lines = [
        f"floors on the same candidates (95% task-bootstrap CIs; Best@{n}, gap closed, AUROC):"
    ]
    for name, r in [("this model", report), *floors.items()]:
        head, ci = r["headline"], r["ci"]
        cells = [_interval(head[k], ci.get(k)) for k in ("best_at_k", "gap_closed", "auroc")]
        lines.append(f"  {name:<14} " + "  ".join(cells))
        delta = r.get("model_minus_floor", {}).get("gap_closed")
        if delta:
            lines.append(
                f"  {'':<14} model − floor, gap closed: {_interval(delta['point'], delta)}"
            )
    return lines


@click.command("score")
@MODEL_ARG
@lake_options
@at_option
@WHERE_OPTION
@engine_options
@output_option()
def score(
    model: str,
    lake: LakeSpec,
    at: str | None,
    where: str | None,
    output: str,
    engine: str,
    **ray_flags: Any,
) -> None:
    """Score trajectories with MODEL and store the scores (a new snapshot, table `scores`).

    With `--engine ray`, an actor pool scores and the scores are committed every
    `--commit-every` batches; a rerun skips what this model has scored.
    """
    options = ray_options_of(engine, ray_flags)
    if options is not None:
        _score_on_ray(model, lake, at, where, output, options)
        return
    from trajlake.value.artifacts import load_model
    from trajlake.value.scoring import score_to_lake

    saved = load_model(model)
    result, n = score_to_lake(lake.open(), saved, at=at, where=where)
    if output == "json":
        click.echo(dumps({"model_id": saved.model_id, "scored": n, "snapshot": result.snapshot_id}))
        return
    click.echo(f"scored {n} trajectories with {saved.model_id}: snapshot {result.snapshot_id}")


def _score_on_ray(
    model: str, lake: LakeSpec, at: str | None, where: str | None, output: str, options: Any
) -> None:
    from trajlake.distributed import score_with_ray

    report = score_with_ray(lake.open(), model, at=at, where=where, options=options)
    if output == "json":
        click.echo(dumps(report.to_dict()))
        return
    click.echo(
        f"scored {report.scored} trajectories with {report.model_id} on Ray "
        f"({report.already_scored} already scored, {report.commits} commits): "
        f"snapshot {report.snapshot}"
    )


@click.command("rerank")
@MODEL_ARG
@lake_options
@at_option
@WHERE_OPTION
@click.option(
    "--group-by",
    default="task_id",
    show_default=True,
    help="Column whose values form the candidate groups.",
)
@click.option("--top", default=0, help="Show only the best N of each group (0 = all).")
@output_option()
def rerank(
    model: str,
    lake: LakeSpec,
    at: str | None,
    where: str | None,
    group_by: str,
    top: int,
    output: str,
) -> None:
    """Rank candidate trajectories per task with MODEL, best first."""
    from trajlake.value.artifacts import load_model
    from trajlake.value.scoring import rerank_lake

    rankings = rerank_lake(lake.open(), load_model(model), at=at, where=where, group_by=group_by)
    if output == "json":
        click.echo(
            dumps([{"group": r.group, "candidates": r.candidates[: top or None]} for r in rankings])
        )
        return
    for ranking in rankings:
        click.echo(f"{group_by} {ranking.group}")
        for c in ranking.candidates[: top or None]:
            outcome = "?" if c.resolved is None else "resolved" if c.resolved else "unresolved"
            click.echo(f"  {c.rank:>3}  {c.score:.4f}  {c.trajectory_id}  {outcome}")


@click.command("serve")
@MODEL_ARG
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8000, show_default=True, help="Port (0 picks a free one).")
@click.option(
    "--token",
    default=None,
    envvar="TRAJLAKE_SERVE_TOKEN",
    help="Require `Authorization: Bearer TOKEN` (needed to bind beyond loopback).",
)
@click.option("--max-batch", default=32, show_default=True, help="Candidates per model batch.")
@click.option("--max-wait-ms", default=5.0, show_default=True, help="Batching window.")
@click.option("--device", default=None, help="cpu, cuda, cuda:1 … (default: cuda if present).")
@click.option(
    "--limit", "limits", multiple=True, metavar="KEY=VALUE", callback=parse_limits, help=LIMIT_HELP
)
def serve(
    model: str,
    host: str,
    port: int,
    token: str | None,
    max_batch: int,
    max_wait_ms: float,
    device: str | None,
    limits: ServerLimits,
) -> None:
    """Serve MODEL over HTTP: POST /v1/rerank, GET /health, GET /v1/stats."""
    from trajlake.serve import load_reranker, run_server

    reranker = load_reranker(Path(model), device=device)

    def ready(bound_host: str, bound_port: int) -> None:
        click.echo(f"serving {reranker.model_id} on http://{bound_host}:{bound_port}", err=True)

    run_server(
        reranker,
        host=host,
        port=port,
        token=token,
        ready=ready,
        max_batch_candidates=max_batch,
        max_wait_ms=max_wait_ms,
        limits=limits,
    )
