"""Request parameters of the viewer's endpoints: parsing, validation and the error they raise.

Every endpoint reads its parameters from a plain `str → str` mapping (the query string in server
mode, a dict in the bundle writer), so both produce the same payloads. A bad parameter raises
`ViewRequestError`, which the server answers as `{"error": …, "field": …}` with its status.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from typing import Any

Params = Mapping[str, str]
"""An endpoint's parameters: name → value, as in a query string."""


class ViewRequestError(ValueError):
    """A request the viewer cannot answer: `status` 400 (bad parameter) or 404 (not found)."""

    def __init__(self, message: str, *, status: int = 400, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field

    def payload(self) -> dict[str, Any]:
        """The JSON error body of the contract."""
        body: dict[str, Any] = {"error": str(self)}
        if self.field is not None:
            body["field"] = self.field
        return body


def text(params: Params, name: str) -> str | None:
    """The parameter stripped, or None when absent or blank."""
    value = params.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def required(params: Params, name: str) -> str:
    """The parameter, or a 400 naming it."""
    value = text(params, name)
    if value is None:
        raise ViewRequestError(f"the `{name}` parameter is required", field=name)
    return value


def integer(
    params: Params, name: str, default: int, *, low: int = 0, high: int | None = None
) -> int:
    """An integer parameter within [low, high], `default` when absent."""
    value = text(params, name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ViewRequestError(f"`{name}` must be an integer, got {value!r}", field=name) from None
    if number < low or (high is not None and number > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise ViewRequestError(f"`{name}` must be {bound}, got {number}", field=name)
    return number


def choice(params: Params, name: str, options: tuple[str, ...], default: str | None) -> str | None:
    """One of `options`, `default` when absent."""
    value = text(params, name)
    if value is None:
        return default
    if value not in options:
        raise ViewRequestError(
            f"`{name}` must be one of {', '.join(options)}, got {value!r}", field=name
        )
    return value


def jsonable(value: Any) -> Any:
    """`value` with timestamps as ISO strings and non-finite floats as None, recursively."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def payload(value: dict[str, Any]) -> dict[str, Any]:
    """`jsonable` of an endpoint's payload (typed as the dict it stays)."""
    out = jsonable(value)
    assert isinstance(out, dict)
    return out


def parse_json(value: str | None) -> Any:
    """A JSON column's value as an object (the text itself when it is not valid JSON)."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value
