"""Options shared by commands: `--lake` (+ storage options), `--at`, `--output` and `make_output`.

Every command declares these through the decorators here, so a flag shared by many commands has one
spelling and one help text. `--lake` becomes a `LakeSpec` that is opened only when the command needs
the lake, so a refused argument never creates or touches one. `make_output` sits beside
`output_option` rather than in `output.py`: `text_output` builds on `output`, and choosing between
them is the option's job, one level up.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import click

import trajlake as tl
from trajlake.cli.output import CsvOutput, JsonOutput, Output

F = TypeVar("F", bound=Callable[..., Any])

LAKE_ENV = "TRAJLAKE_LAKE"
STORAGE_OPTIONS_ENV = "TRAJLAKE_STORAGE_OPTIONS"


@dataclass(frozen=True)
class LakeSpec:
    """Where a lake lives and how to reach it; opened only when a command needs it."""

    uri: str
    storage_options: dict[str, str] = field(default_factory=dict)

    def open(self, *, create: bool = False) -> tl.Lake:
        """Open the lake (LakeNotFound unless it exists or `create`)."""
        return tl.open_lake(self.uri, create=create, storage_options=self.options())

    def init(self) -> tl.Lake:
        """Create the lake (LakeAlreadyExists if one is there)."""
        return tl.init_lake(self.uri, storage_options=self.options())

    def options(self) -> dict[str, str] | None:
        """Storage options for the API, None when there are none."""
        return dict(self.storage_options) or None


def parse_storage_options(
    pairs: Sequence[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Storage options from `TRAJLAKE_STORAGE_OPTIONS` (a JSON object), then `KEY=VALUE` pairs."""
    env = os.environ if environ is None else environ
    options: dict[str, str] = {}
    text = env.get(STORAGE_OPTIONS_ENV, "").strip()
    if text:
        try:
            loaded = json.loads(text)
        except ValueError as e:
            raise click.BadParameter(
                f"{STORAGE_OPTIONS_ENV} must be a JSON object of strings: {e}"
            ) from e
        if not isinstance(loaded, dict):
            raise click.BadParameter(f"{STORAGE_OPTIONS_ENV} must be a JSON object of strings")
        options.update({str(k): str(v) for k, v in loaded.items()})
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(
                f"expected KEY=VALUE, got {pair!r}", param_hint="'--storage-option'"
            )
        options[key.strip()] = value
    return options


def lake_options(func: F) -> F:
    """Add `--lake` (env TRAJLAKE_LAKE) and `--storage-option`; the command receives a LakeSpec."""

    @functools.wraps(func)
    def wrapper(*args: Any, lake: str, storage_option: tuple[str, ...], **kwargs: Any) -> Any:
        spec = LakeSpec(lake, parse_storage_options(storage_option))
        return func(*args, lake=spec, **kwargs)

    wrapper = click.option(
        "--storage-option",
        "storage_option",
        multiple=True,
        metavar="KEY=VALUE",
        help=(
            "Object-store option (credentials, endpoint, region), repeatable; "
            f"also env {STORAGE_OPTIONS_ENV} as a JSON object."
        ),
    )(wrapper)
    wrapper = click.option(
        "--lake",
        envvar=LAKE_ENV,
        required=True,
        metavar="URI",
        help=f"Lake URI: a path, memory://NAME, s3://, gs:// or az:// (env {LAKE_ENV}).",
    )(wrapper)
    return cast(F, wrapper)


def redaction_policy_options(func: F) -> F:
    """Add `--redact-personal` and `--allow-list`: the redaction policy of ingest and proxy."""
    func = click.option(
        "--allow-list",
        "allow_list",
        type=click.Path(exists=True, dir_okay=False),
        default=None,
        help="File of values never redacted: one a line, exact or `re:REGEX` (whole match), "
        "`#` comments.",
    )(func)
    return click.option(
        "--redact-personal",
        is_flag=True,
        help="Also replace personal data (e-mail addresses, phone numbers); kept by default. "
        "Credentials always are.",
    )(func)


at_option = click.option(
    "--at",
    "at",
    default=None,
    metavar="REF",
    help="Read at a snapshot: an id, a tag name, an ISO timestamp or 'latest' (default).",
)


def where_option(example: str = "resolved AND stage = 'eval'") -> Callable[[F], F]:
    """`--where SQL`: the one selection contract of the exports (a condition on `trajectories`)."""
    return click.option(
        "--where",
        default=None,
        metavar="SQL",
        help=f'SQL condition on the trajectories table, e.g. "{example}".',
    )


def split_options(share_of: str) -> Callable[[F], F]:
    """`--val-frac` and `--seed`: a validation split by task hash (`share_of`: what is split)."""

    def decorate(func: F) -> F:
        func = click.option(
            "--seed", type=int, default=0, show_default=True, help="Seed of the task split."
        )(func)
        return click.option(
            "--val-frac",
            type=click.FloatRange(0.0, 1.0, max_open=True),
            default=0.0,
            show_default=True,
            help=f"Share of {share_of} written to val.",
        )(func)

    return decorate


def output_option(*choices: str) -> Callable[[F], F]:
    """`--output` with the given formats (the first is the default)."""
    formats = choices or ("text", "json")
    return click.option(
        "--output",
        "-o",
        "output",
        type=click.Choice(formats),
        default=formats[0],
        show_default=True,
        help="text for people; " + ", ".join(f for f in formats if f != "text") + " for programs.",
    )


def shard_size_option(help: str) -> Callable[[F], F]:
    """`--shard-size MB` (to the `shard_mb` argument): when an export starts a new shard."""
    return click.option(
        "--shard-size",
        "shard_mb",
        type=click.FloatRange(min=0.0, min_open=True),
        default=100.0,
        show_default=True,
        metavar="MB",
        help=help,
    )


def make_output(kind: str) -> Output:
    """The Output for an `--output` value."""
    if kind == "json":
        return JsonOutput()
    if kind == "csv":
        return CsvOutput()
    if kind == "text":
        # rich's tables load only when text is rendered, as the CLI imports each command lazily.
        from trajlake.cli.text_output import TextOutput

        return TextOutput()
    raise ValueError(f"unknown output format {kind!r}; choose text, json or csv")
