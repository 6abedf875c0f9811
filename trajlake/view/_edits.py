"""File edits recovered from tool calls, as unified diffs (`difflib`), for the transcript.

Recognised shapes, as real harnesses write them: SWE-agent / OpenHands `str_replace_editor`
(and Anthropic's `str_replace_based_edit_tool`) with `str_replace`, `create` and `insert`; Claude
Code `Edit`, `MultiEdit` and `Write`; Codex `apply_patch` (`*** Begin Patch` envelopes) and
`git diff`-style patches anywhere in the arguments; and `sed -i 's/a/b/' file` in shell commands
(shown as a one-line substitution diff: the file's text is not known). A call that matches none
gives no edit; nothing here fails on odd arguments.
"""

from __future__ import annotations

import difflib
import re
import shlex
from typing import Any

from trajlake.query import SHELL_TOOLS

EDITOR_TOOLS = frozenset({"str_replace_editor", "str_replace_based_edit_tool", "edit_file"})
_PATCH_START = re.compile(r"^(\*\*\* Begin Patch|diff --git |--- \S)", re.M)
_CODEX_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$", re.M)
_GIT_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)|^\+\+\+ (?:b/)?(\S+)", re.M)
_SED_SCRIPT = re.compile(r"^s(.)(.*?)(?<!\\)\1(.*?)(?<!\\)\1([gIp0-9]*)$", re.S)

Edit = dict[str, Any]
"""`{"kind": "str_replace"|"write"|"patch"|"sed", "path": str|None, "diff": str}`."""


def _git_name(path: str | None) -> str:
    """The file name after git's `a/` and `b/` (an absolute path loses its leading slash, as in
    `git diff --no-index`)."""
    return (path or "").lstrip("/") or "file"


def unified(path: str | None, before: str, after: str, *, start: int = 1) -> str:
    """A unified diff of two texts (`start`: the first line's number in the file)."""
    name = _git_name(path)
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
        n=3,
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    if not text:  # an edit that changes nothing: the file names alone
        return f"--- a/{name}\n+++ b/{name}\n"
    if start > 1:  # difflib numbers from 1: shift the hunk headers to the place in the file
        text = re.sub(
            r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@",
            lambda m: (
                f"@@ -{int(m[1]) + start - 1}{m[2] or ''} +{int(m[3]) + start - 1}{m[4] or ''} @@"
            ),
            text,
            flags=re.M,
        )
    return text


def edits_of_call(name: str, arguments: str | None, parsed: Any) -> list[Edit]:
    """The edits one tool call makes (empty when it makes none that can be shown)."""
    args = parsed if isinstance(parsed, dict) else {}
    if name in EDITOR_TOOLS:
        return _editor(args)
    if name in ("Edit", "MultiEdit", "Write", "edit", "write", "create_file"):
        found = _claude_code(name, args)
        if found:
            return found
    if name in SHELL_TOOLS or name in ("apply_patch", "patch"):
        command = _shell_command(args) if args else arguments
        edits = _patches(command or "")
        if not edits and name == "apply_patch":
            edits = _patches(arguments or "")
        return edits or _sed_edits(command or "")
    # Patches can sit in any tool's arguments (a `git apply` heredoc, a submit tool).
    return _patches(arguments or "") if arguments and _PATCH_START.search(arguments) else []


def _editor(args: dict[str, Any]) -> list[Edit]:
    command, path = args.get("command"), args.get("path")
    path = path if isinstance(path, str) else None
    if command == "str_replace" and isinstance(args.get("old_str"), str):
        new = args.get("new_str")
        return [_replacement(path, args["old_str"], new if isinstance(new, str) else "")]
    if command == "create" and isinstance(args.get("file_text"), str):
        return [{"kind": "write", "path": path, "diff": unified(path, "", args["file_text"])}]
    if command == "insert" and isinstance(args.get("new_str"), str):
        line = args.get("insert_line")
        start = line + 1 if isinstance(line, int) and line >= 0 else 1
        diff = unified(path, "", args["new_str"], start=start)
        return [{"kind": "str_replace", "path": path, "diff": diff}]
    return []


def _claude_code(name: str, args: dict[str, Any]) -> list[Edit]:
    path = args.get("file_path") or args.get("path")
    path = path if isinstance(path, str) else None
    if name in ("Write", "write", "create_file") and isinstance(args.get("content"), str):
        return [{"kind": "write", "path": path, "diff": unified(path, "", args["content"])}]
    if name == "MultiEdit" and isinstance(args.get("edits"), list):
        return [
            _replacement(path, e["old_string"], e.get("new_string") or "")
            for e in args["edits"]
            if isinstance(e, dict) and isinstance(e.get("old_string"), str)
        ]
    if isinstance(args.get("old_string"), str):
        new = args.get("new_string")
        return [_replacement(path, args["old_string"], new if isinstance(new, str) else "")]
    return []


def _replacement(path: str | None, old: str, new: str) -> Edit:
    return {"kind": "str_replace", "path": path, "diff": unified(path, old, new)}


def _shell_command(args: dict[str, Any]) -> str | None:
    command = args.get("command", args.get("cmd", args.get("input", args.get("patch"))))
    if isinstance(command, list):  # Codex argv: ["bash", "-lc", "<script>"]
        return str(command[-1]) if command else None
    return command if isinstance(command, str) else None


def _patches(text: str) -> list[Edit]:
    """Patches in a text: Codex `*** Begin Patch` envelopes and git/unified diffs."""
    match = _PATCH_START.search(text)
    if match is None:
        return []
    body = text[match.start() :]
    if body.startswith("*** Begin Patch"):
        return _codex_patch(body)
    end = re.search(r"^(EOF|PATCH|END)\s*$", body, re.M)  # the end of a heredoc
    diff = body[: end.start()] if end else body
    files = _GIT_FILE.search(diff)
    path = next((g for g in files.groups() if g), None) if files else None
    return [{"kind": "patch", "path": path, "diff": diff if diff.endswith("\n") else diff + "\n"}]


def _codex_patch(body: str) -> list[Edit]:
    end = body.find("*** End Patch")
    body = body[: end if end >= 0 else len(body)]
    edits: list[Edit] = []
    headers = list(_CODEX_FILE.finditer(body))
    for i, header in enumerate(headers):
        chunk_end = headers[i + 1].start() if i + 1 < len(headers) else len(body)
        chunk = body[header.end() : chunk_end].strip("\n")
        action, path = header.group(1), header.group(2).strip()
        if action == "Add":  # every line is `+text`
            added = "".join(line[1:] + "\n" for line in chunk.splitlines() if line.startswith("+"))
            diff = unified(path, "", added)
        elif action == "Delete":
            diff = f"--- a/{_git_name(path)}\n+++ /dev/null\n"
        else:
            name = _git_name(path)
            diff = f"--- a/{name}\n+++ b/{name}\n" + (chunk + "\n" if chunk else "")
        edits.append({"kind": "patch", "path": path, "diff": diff})
    return edits


def _sed_edits(command: str) -> list[Edit]:
    """`sed -i 's/old/new/flags' FILE…` as one-line substitution diffs."""
    edits: list[Edit] = []
    if "sed" not in command or "-i" not in command:  # most commands: no need to parse them
        return edits
    for segment in re.split(r"&&|\|\||;|\n", command):
        try:
            words = shlex.split(segment)
        except ValueError:
            continue
        if len(words) < 3 or words[0] != "sed" or not any(w.startswith("-i") for w in words):
            continue
        scripts: list[str] = []
        files: list[str | None] = []
        expect_script = False
        for word in words[1:]:
            if expect_script:
                scripts.append(word)
                expect_script = False
            elif word in ("-e", "--expression"):
                expect_script = True
            elif word.startswith("-"):
                continue
            elif not scripts:
                scripts.append(word)
            else:
                files.append(word)
        for script in scripts:
            match = _SED_SCRIPT.match(script)
            if match is None:
                continue
            old, new = match.group(2), match.group(3)
            for path in files or [None]:
                name = _git_name(path)
                diff = f"--- a/{name}\n+++ b/{name}\n@@ sed {script} @@\n-{old}\n+{new}\n"
                edits.append({"kind": "sed", "path": path, "diff": diff})
    return edits
