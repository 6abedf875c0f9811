"""The `credit` command: run a credit estimator over the lake and store the run in `credits`.

All the estimator logic lives in `trajlake.credit.runs`; this module only maps flags onto
`run_credit`. Estimator-specific arguments come as generic `--source-option KEY=VALUE` pairs rather
than one flag each, so a new value source needs no CLI change.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import click

from trajlake.cli.engine_options import engine_options, ray_options_of
from trajlake.cli.options import LakeSpec, at_option, lake_options, output_option
from trajlake.cli.output import dumps
from trajlake.credit.masks import MASK_RULES
from trajlake.credit.runs import (
    AUTO_CROSSFIT,
    AUTO_MIN_TASKS,
    CreditRunReport,
    diagnostics,
    run_credit,
)

if TYPE_CHECKING:
    from trajlake.distributed import RayOptions


def parse_source_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    """`KEY=VALUE` pairs → keyword arguments (values parsed as JSON when they are JSON)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(
                f"expected KEY=VALUE, got {pair!r}", param_hint="'--source-option'"
            )
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def _credit_function(options: RayOptions | None) -> Callable[..., CreditRunReport]:
    """`run_credit`, or its Ray counterpart (Ray imported only then)."""
    if options is None:
        return run_credit
    from trajlake.distributed import credit_with_ray

    return partial(credit_with_ray, options=options)


@click.command("credit")
@lake_options
@click.option(
    "--estimator",
    default="auto",
    show_default=True,
    metavar="NAME",
    help=f"Value source: auto (picks one from the data and says which and why: {AUTO_CROSSFIT} "
    f"with labels on >= {AUTO_MIN_TASKS} tasks, else anchor when tasks have several rollouts), "
    "outcome, prefix-mc, group, group:rloo, value-model:<path|builtin>, judge, judge:rubric, "
    "crossfit:text, crossfit:text-td (out-of-fold text value models), crossfit:text-task, "
    "crossfit:text-td-task (the same plus the task's success rate from sibling rollouts), "
    "anchor, progress, progress-td (per-turn progress summing to the outcome), "
    "hindsight:<model name|dir|fit> (causal-LM hindsight), ensemble:<a>+<b>+... "
    "(cross-fitted combination). See docs/credit.md for what each measured.",
)
@click.option("--gamma", type=float, default=1.0, show_default=True, help="Discount γ of GAE.")
@click.option(
    "--lam", type=float, default=0.0, show_default=True, help="GAE λ: 0 = TD credit, 1 = MC."
)
@click.option("--n-step", type=int, default=None, help="Use n-step advantages instead of GAE.")
@click.option(
    "--mask",
    type=click.Choice(MASK_RULES),
    default="rise",
    show_default=True,
    help="Mask rule: Orchard rise segments, step rejection, first error, advantage weights, all.",
)
@click.option("--eps", type=float, default=0.05, show_default=True, help="ε of rise segments.")
@click.option("--beta", type=float, default=1.0, show_default=True, help="β of advantage weights.")
@click.option(
    "--w-max", type=float, default=5.0, show_default=True, help="Cap of advantage weights."
)
@at_option
@click.option("--where", default=None, metavar="SQL", help="Condition on `trajectories`.")
@click.option("--name", default=None, metavar="RUN_NAME", help="Run name (default: derived).")
@click.option(
    "--source-option",
    "source_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Value-source argument, repeatable (VALUE parsed as JSON when it is JSON), e.g. "
    "min_visits=3, base_url=... model=... for judge (prompt=rubric or rubric=FILE for a rubric), "
    "folds=5 seed=0 l2=... for crossfit:text, link=logit mc_weight=3 for progress, "
    "component_options={...} for ensemble. With auto they go to the chosen source.",
)
@click.option("--diagnose", is_flag=True, help="Also compute Orchard's diagnostics of the run.")
@engine_options
@output_option()
def credit(
    lake: LakeSpec,
    estimator: str,
    gamma: float,
    lam: float,
    n_step: int | None,
    mask: str,
    eps: float,
    beta: float,
    w_max: float,
    at: str | None,
    where: str | None,
    name: str | None,
    source_options: tuple[str, ...],
    diagnose: bool,
    output: str,
    engine: str,
    **ray_flags: Any,
) -> None:
    """Compute per-turn values, credits, advantages and masks; store them as a credit run.

    One row per turn goes to the `credits` table in one commit; re-running a stored run
    (same name, snapshot and parameters) adds nothing. Query it with
    `trajlake sql "SELECT * FROM credits WHERE run_name = '...'"`. Assumptions the data
    breaks (one rollout per task, no task id, no outcome, fewer tasks than folds) are printed
    as warnings (`warnings` in JSON). With `--engine ray`, an actor pool computes the run and
    its rows are committed every `--commit-every` batches; a rerun of the same run skips what
    is stored (docs/distributed.md lists the estimators it takes).
    """
    opened = lake.open()
    compute = _credit_function(ray_options_of(engine, ray_flags))
    report = compute(
        opened,
        estimator=estimator,
        gamma=gamma,
        lam=lam,
        n_step=n_step,
        mask=mask,
        eps=eps,
        beta=beta,
        w_max=w_max,
        at=at,
        where=where,
        name=name,
        **parse_source_options(source_options),
    )
    stats = (
        diagnostics(opened, report.run_name)
        if diagnose and (report.turns or report.existing)
        else None
    )
    if output == "json":
        data = report.to_dict()
        if stats is not None:
            data["diagnostics"] = stats
        click.echo(dumps(data))
        return
    click.echo(report.summary())
    if stats is not None:
        click.echo(" ".join(f"{k}={v}" for k, v in stats.items()))
