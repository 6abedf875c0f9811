"""Names and paths that come from users or data: one check for every name that becomes a file or
folder (tags, model ids, recipe and policy names), the refusal of outputs inside a lake, and
injective file names for trajectory ids.

A core module (it imports only `errors`) because the lake, export, value training and the CLI all
turn names into paths and must apply the same rule. Ids from data are never refused; they are mapped
to file names that no other id can take, even on case-insensitive file systems.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re

from trajlake.errors import OutputInsideLake, UnsafeName

NAME_MAX = 128
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
NAME_RULE = (
    "use letters, digits, '.', '_' or '-', starting with a letter or digit, at most "
    f"{NAME_MAX} characters"
)

LAKE_ARTIFACT_DIRS = ("models", "demo-report")
"""Folders of a local lake that hold outputs (value models, the loop's report), not lake data."""

STEM_MAX = 150
"""Longest id kept as its own file stem; longer or escaped ids get a cut stem plus a hash."""
_HASHED_PREFIX = 120
_HASH_CHARS = 16
_HASH_MARK = "~"  # never in a plain stem, so a hashed stem cannot equal another id's plain one
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_RESERVED = frozenset(
    {"con", "prn", "aux", "nul"} | {f"com{i}" for i in range(10)} | {f"lpt{i}" for i in range(10)}
)
"""Device names Windows refuses as file names, whatever the extension."""


def check_name(kind: str, name: object) -> str:
    """`name` itself when it is safe as one file or folder name, else UnsafeName.

    Args:
        kind: What the name is ("tag", "model id", "recipe", ...), for the message.
        name: The candidate; it must be a string matching `[A-Za-z0-9][A-Za-z0-9._-]*`, at most
            `NAME_MAX` characters. Checked with a full match: a trailing newline is refused.

    Raises:
        UnsafeName: (a ValueError) naming the kind, the name and the rule.
    """
    if isinstance(name, str) and len(name) <= NAME_MAX and _NAME.fullmatch(name):
        return name
    raise UnsafeName(f"invalid {kind} name {name!r}: {NAME_RULE} (it becomes a file name)")


def _comparable(uri: str) -> tuple[str, str]:
    """(scheme, normalised absolute path) of a local path or URL, symlinks resolved locally."""
    if uri.startswith("file://"):
        uri = uri.removeprefix("file://")
    if "://" not in uri:
        return "file", os.path.realpath(uri)
    scheme, rest = uri.split("://", 1)
    scheme = {"s3a": "s3", "gcs": "gs", "abfss": "abfs"}.get(scheme, scheme)
    return scheme, posixpath.normpath("/" + rest)


def _inside(path: str, root: str, sep: str) -> tuple[str, ...] | None:
    """Parts of `path` below `root` (empty for the root itself), or None when outside it."""
    if path == root:
        return ()
    prefix = root.rstrip(sep) + sep
    if not path.startswith(prefix):  # with the separator: `<lake>-other` is not inside
        return None
    return tuple(part for part in path[len(prefix) :].split(sep) if part)


def refuse_inside_lake(
    path: str | os.PathLike[str], lake_uri: str, *, what: str = "output"
) -> None:
    """Raise OutputInsideLake when `path` lies in the lake at `lake_uri` (its root included).

    A file written among the lake's tables or log makes the lake unreadable (a Delta log entry
    or snapshot that is not one). Only the lake's output folders (`LAKE_ARTIFACT_DIRS`: value
    models, the loop's report) take outputs. Paths on another store are never inside.
    """
    scheme, target = _comparable(os.fspath(path))
    lake_scheme, root = _comparable(lake_uri)
    if scheme != lake_scheme:
        return
    parts = _inside(target, root, os.sep if scheme == "file" else "/")
    if parts is None or (parts and parts[0] in LAKE_ARTIFACT_DIRS):
        return
    raise OutputInsideLake(
        f"{what} {os.fspath(path)!r} is inside the lake {lake_uri}: files written there can make "
        "its tables or snapshot log unreadable; choose a path outside the lake (inside it only "
        f"{', '.join(d + '/' for d in LAKE_ARTIFACT_DIRS)} take outputs)"
    )


def file_stem_for_id(identifier: str, *, hashed: bool = False) -> str:
    """A file stem for an id that no other id maps to.

    A short id made only of letters, digits, '.', '_' and '-' (not starting with '.') is its
    own stem. Any other id (or any id when `hashed`) becomes its escaped form, cut to 120
    characters, plus `~` and 16 hex digits of the SHA-256 of the exact id: at most 137 ASCII
    characters, and `~` never appears in a plain stem, so two ids never share a stem.
    """
    escaped = _UNSAFE.sub("_", identifier)
    plain = (
        escaped == identifier
        and 0 < len(identifier) <= STEM_MAX
        and not identifier.startswith(".")
        and identifier.split(".", 1)[0].lower() not in _RESERVED
    )
    if plain and not hashed:
        return identifier
    digest = hashlib.sha256(identifier.encode("utf-8", "surrogatepass")).hexdigest()
    prefix = escaped[:_HASHED_PREFIX].lstrip(".")
    return f"{prefix}{_HASH_MARK}{digest[:_HASH_CHARS]}"


class FileNames:
    """Assigns file names to ids, unique even on case-insensitive file systems."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix
        self._taken: set[str] = set()

    def assign(self, identifier: str) -> str:
        """`<stem><suffix>` for the id; the hashed stem when the plain one differs from a name
        already given only by case (`A` and `a` are one file on macOS and Windows)."""
        name = file_stem_for_id(identifier) + self.suffix
        if name.casefold() in self._taken:
            name = file_stem_for_id(identifier, hashed=True) + self.suffix
        if name.casefold() in self._taken:  # the same id twice: one file would overwrite another
            raise UnsafeName(f"two trajectories map to the file {name!r} (id {identifier!r})")
        self._taken.add(name.casefold())
        return name
