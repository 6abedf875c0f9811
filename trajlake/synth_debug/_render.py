"""Text of the debugging environment: fake repositories with several bugs and chat turns.

The abstract episode fixes what happens; the text (search hits, file listings, diffs, pytest
output, restores) is drawn consistently with each transition and never changes it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from trajlake.synth_debug._dynamics import Action, State

_PACKAGES = ["ledgerly", "quartzdb", "pathwise", "sparrow", "mailroom", "tabulate", "kiln", "orbit"]
_MODULES = [
    "accounts", "billing", "calendar", "export", "filters", "formats", "importer", "indexer",
    "locks", "metrics", "pager", "quota", "ranges", "reports", "rounding", "timezones",
]  # fmt: skip
_BUGS: list[tuple[str, str, str, str, str]] = [
    # (function, buggy line, correct line, plausible wrong line, symptom)
    ("page_slice", "    return items[start:start + size - 1]",
     "    return items[start:start + size]", "    return items[start + 1:start + size]",
     "drops the last item of every page"),
    ("round_cents", "    return int(amount * 100) / 100", "    return round(amount * 100) / 100",
     "    return int(amount * 100 + 0.5) / 100", "truncates instead of rounding"),
    ("parse_window", "    lo, hi = text.split('-')", "    lo, hi = text.split('-', 1)",
     "    lo, hi = text.rsplit('-')", "fails on negative bounds"),
    ("merge_tags", "    return tags.extend(extra)", "    return [*tags, *extra]",
     "    return tags + extra[1:]", "returns None instead of the merged list"),
    ("to_utc", "    return stamp.replace(tzinfo=UTC)", "    return stamp.astimezone(UTC)",
     "    return stamp.replace(tzinfo=None)", "ignores the original offset"),
    ("quota_left", "    return limit - used if used < limit else limit",
     "    return max(limit - used, 0)", "    return abs(limit - used)",
     "reports a full quota when exceeded"),
    ("is_locked", "    return lock.owner is None", "    return lock.owner is not None",
     "    return bool(lock)", "reports free locks as locked"),
]  # fmt: skip
_FILLER = [
    "value = data.get(key)", "if value is None:", "    return default", "out.append(value)",
    "log.debug('%s=%r', key, value)", "seen.add(key)", "items = sorted(items, key=str)",
    "for key in keys:", "return out", "raise KeyError(key)",
]  # fmt: skip
HELPER = "_coerce"
"""The shared helper whose signature a breaking edit changes (the regression)."""

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": "string"} for p in params},
                "required": list(params),
            },
        },
    }
    for name, desc, params in [
        ("search_code", "Search the repository for a text.", ("query",)),
        ("open_file", "Print a file with line numbers.", ("path",)),
        ("replace_in_file", "Replace text in a file.", ("path", "old", "new")),
        ("run_pytest", "Run the visible test suite.", ("args",)),
        ("git_restore", "Restore a file's unintended changes.", ("path",)),
        ("submit", "Submit the working tree as the final patch.", ()),
    ]
]
TOOL_NAMES: dict[Action, str] = {
    "search": "search_code",
    "read": "open_file",
    "edit": "replace_in_file",
    "test": "run_pytest",
    "revert": "git_restore",
    "submit": "submit",
}


@dataclass(frozen=True)
class Bug:
    """One bug: the file it sits in, its line and the buggy, correct and wrong texts."""

    file: int
    line: int
    """1-based line of the buggy statement."""
    function: str
    buggy: str
    fixed: str
    wrong: str
    symptom: str


@dataclass(frozen=True)
class DebugRepo:
    """A fake repository; bug 0 is the primary (in the issue, covered by the visible tests)."""

    task_id: str
    package: str
    files: tuple[str, ...]
    sources: tuple[tuple[str, ...], ...]
    bugs: tuple[Bug, ...]
    helper_file: int

    @property
    def issue(self) -> str:
        """The task statement shown to the agent (it only describes the primary bug)."""
        bug = self.bugs[0]
        return (
            f"<issue>\n`{self.package}.{bug.function}()` {bug.symptom}. Please fix it; the "
            f"maintainers' full test run must pass.\n</issue>"
        )


def make_repo(rng: random.Random, task_id: str, n_files: int, n_bugs: int) -> DebugRepo:
    """Draw a repository of `n_files` modules with `n_bugs` bugs in distinct files."""
    package = rng.choice(_PACKAGES)
    modules = rng.sample(_MODULES, n_files)
    sources: list[list[str]] = []
    for m in modules:
        lines = [
            f'"""{m.title()} of {package}."""',
            "",
            "import logging",
            "",
            "log = logging.getLogger(__name__)",
            "",
        ]
        for k in range(rng.randint(2, 4)):
            lines += [f"def {m}_{k}(data, key, default=None):", "    out = []"]
            lines += ["    " + rng.choice(_FILLER) for _ in range(rng.randint(3, 7))]
            lines += ["    return out", ""]
        sources.append(lines)
    where = rng.sample(range(n_files), n_bugs + 1)
    bugs = []
    for file, (function, buggy, fixed, wrong, symptom) in zip(
        where, rng.sample(_BUGS, n_bugs), strict=False
    ):
        sources[file] += [f"def {function}(*args):", "    # validated by the caller", buggy, ""]
        bugs.append(Bug(file, len(sources[file]) - 1, function, buggy, fixed, wrong, symptom))
    helper = where[-1]
    sources[helper] += [f"def {HELPER}(value):", "    return str(value).strip()", ""]
    return DebugRepo(
        task_id, package, tuple(f"{package}/{m}.py" for m in modules),
        tuple(tuple(s) for s in sources), tuple(bugs), helper,
    )  # fmt: skip


def _listing(lines: list[str] | tuple[str, ...], start: int = 0) -> str:
    return "\n".join(f"{start + i + 1:5d}  {line}" for i, line in enumerate(lines))


_THOUGHTS: dict[Action, list[str]] = {
    "search": ["Let me search for the code the issue mentions.", "Searching for the symptom."],
    "read": ["Let me read another module to understand the flow.", "Opening a file to inspect it."],
    "edit": ["I'll change this to what I believe is correct.", "Let me patch this line."],
    "test": ["Let me run the test suite.", "Running pytest to check the change."],
    "revert": ["Something unrelated broke; let me restore that file.", "Undoing the stray change."],
    "submit": ["The tests look good; submitting.", "I think the fix is complete. Submitting."],
}


class DebugRenderer:
    """Renders one episode's turns as chat messages, tracking which bug is where in the text."""

    def __init__(self, repo: DebugRepo, rng: random.Random) -> None:
        self.repo = repo
        self.rng = rng
        self.found: list[int] = []
        """Bug indices in the order they were located (text follows the abstract counts)."""
        self.fixed: set[int] = set()
        self.current: dict[tuple[int, int], tuple[str, str]] = {}
        """(file, 1-based line) -> (original, current) of every edited line."""

    @property
    def patch(self) -> str:
        """The diff of the working tree (the submitted patch)."""
        hunks = []
        for (i, line), (orig, cur) in sorted(self.current.items()):
            if orig != cur:
                path = self.repo.files[i]
                hunks.append(
                    f"--- a/{path}\n+++ b/{path}\n@@ -{line} +{line} @@\n-{orig}\n+{cur}\n"
                )
        return "".join(hunks)

    def _source(self, i: int) -> list[str]:
        lines = list(self.repo.sources[i])
        for (j, line), (_, cur) in self.current.items():
            if j == i:
                lines[line - 1] = cur
        return lines

    def _clean_file(self) -> int:
        dirty = {b.file for b in self.repo.bugs} | {self.repo.helper_file}
        return self.rng.choice([i for i in range(len(self.repo.files)) if i not in dirty])

    def _edit_line(self, file: int, line: int, new: str) -> tuple[dict[str, Any], str]:
        """Edit one line; (tool arguments, diff text)."""
        old = self._source(file)[line - 1]
        orig = self.current.get((file, line), (old, old))[0]
        self.current[(file, line)] = (orig, new)
        path = self.repo.files[file]
        return {"path": path, "old": old, "new": new}, f"{path}\n@@ {line} @@\n-{old}\n+{new}"

    def _locate(self, before: State, after: State) -> int | None:
        """The bug a transition located: the primary, or the next secondary in index order."""
        if after[0] and not before[0]:
            self.found.append(0)
            return 0
        if after[1] + after[2] > before[1] + before[2]:
            nxt = next(k for k in range(1, len(self.repo.bugs)) if k not in self.found)
            self.found.append(nxt)
            return nxt
        return None

    def call(self, action: Action, before: State, after: State) -> tuple[dict[str, Any], str, int]:
        """(arguments, observation text, exit code) of `action` taking `before` to `after`."""
        if action == "search":
            return self._search(before, after)
        if action == "read":
            return self._read(before, after)
        if action == "edit":
            return self._edit(before, after)
        if action == "test":
            return self._test(before, after)
        if action == "revert":
            path = self.repo.files[self.repo.helper_file]
            if before[3]:
                key = (self.repo.helper_file, self._helper_line())
                orig = self.current.get(key, (self._source(key[0])[key[1] - 1],))[0]
                self.current[key] = (orig, orig)
                return {"path": path}, f"Restored {path}: 1 hunk reverted ({HELPER} signature).", 0
            return {"path": path}, f"error: {path} has no changes to restore", 1
        return {}, "Patch submitted. The maintainers' full test run will decide.", 0

    def _helper_line(self) -> int:
        return len(self.repo.sources[self.repo.helper_file]) - 2

    def _search(self, before: State, after: State) -> tuple[dict[str, Any], str, int]:
        bug = self.repo.bugs[0]
        self._locate(before, after)
        if after[0]:
            path = self.repo.files[bug.file]
            text = f"{path}:{bug.line}:{self._source(bug.file)[bug.line - 1]}"
            return {"query": bug.function}, text, 0
        i = self._clean_file()
        word = self.rng.choice(bug.symptom.split())
        hits = f"{self.repo.files[i]}:{self.rng.randint(6, 30)}:    # {word}"
        return {"query": word}, self.rng.choice([hits, "No matches."]), 0

    def _read(self, before: State, after: State) -> tuple[dict[str, Any], str, int]:
        k = self._locate(before, after)
        i = self.repo.bugs[k].file if k is not None else self._clean_file()
        return {"path": self.repo.files[i]}, _listing(self._source(i)), 0

    def _edit(self, before: State, after: State) -> tuple[dict[str, Any], str, int]:
        bugs = self.repo.bugs
        newly_fixed = None
        if after[0] == 2 and before[0] != 2:
            newly_fixed = 0
        elif after[2] > before[2]:
            newly_fixed = next(k for k in self.found if k > 0 and k not in self.fixed)
        if newly_fixed is not None:
            self.fixed.add(newly_fixed)
            target = bugs[newly_fixed]
            args, diff = self._edit_line(target.file, target.line, target.fixed)
        elif self.found:
            k = self.rng.choice(self.found)
            target = bugs[k]
            new = target.fixed if k in self.fixed else target.wrong
            args, diff = self._edit_line(target.file, target.line, new)
        else:
            i = self._clean_file()
            line = self.rng.randrange(7, len(self.repo.sources[i]))
            old = self._source(i)[line - 1]
            args, diff = self._edit_line(
                i, line, old.replace("key", "name") if "key" in old else old + "  # fix?"
            )
        text = f"Edited {diff}"
        if after[3] and not before[3]:
            # The regression: the edit also changed a shared helper's signature.
            _, extra = self._edit_line(
                self.repo.helper_file, self._helper_line(), f"def {HELPER}(value, strict):"
            )
            text += "\nAlso updated " + extra
        return args, text, 0

    def _test(self, before: State, after: State) -> tuple[dict[str, Any], str, int]:
        self._locate(before, after)
        repo, rng = self.repo, self.rng
        n = rng.randint(20, 90)
        secs = f"{rng.uniform(0.4, 4.0):.2f}s"
        args = {"args": "-q tests/"}
        if after[4] == 3:
            return args, f"{'.' * n}  [100%]\n{n} passed in {secs}", 0
        failures = []
        if after[0] != 2:
            bug = repo.bugs[0]
            where = f"{repo.files[bug.file]}:{bug.line}: in {bug.function}\n" if after[0] else ""
            failures.append(
                (
                    f"tests/test_{bug.function}.py::test_{bug.function}",
                    f"{where}E   AssertionError: {bug.symptom}",
                )
            )
        if after[3]:
            failures.append(
                (f"tests/test_helpers.py::test_{HELPER}",
                 f"E   TypeError: {HELPER}() missing 1 required positional argument: 'strict'")
            )  # fmt: skip
        body = "\n".join(f"___ {name} ___\n{detail}" for name, detail in failures)
        summary = "\n".join(f"FAILED {name}" for name, _ in failures)
        text = (
            f"{'.' * (n - len(failures))}{'F' * len(failures)}  [100%]\n=== FAILURES ===\n{body}\n"
            f"=== short test summary info ===\n{summary}\n"
            f"{len(failures)} failed, {n - len(failures)} passed in {secs}"
        )
        return args, text, 1

    def turn(
        self, t: int, action: Action, before: State, after: State, obs: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The assistant message and its tool message for turn `t`."""
        args, text, code = self.call(action, before, after)
        call_id = f"call_{self.repo.task_id.rsplit('-', 1)[1]}_{t}_{self.rng.randrange(10**6):06d}"
        thought = self.rng.choice(_THOUGHTS[action])
        arguments = json.dumps(args)
        assistant = {
            "role": "assistant",
            "content": thought,
            "tool_calls": [
                {
                    "id": call_id,
                    "name": TOOL_NAMES[action],
                    "arguments": arguments,
                    "type": "function",
                }
            ],
            "completion_tokens": 10
            + len(thought) // 4
            + len(arguments) // 4
            + self.rng.randint(0, 30),
            "finish_reason": "tool_calls",
            "attrs": {"synth_debug": {"state": obs, "action": action}},
        }
        tool = {
            "role": "tool",
            "tool_call_id": call_id,
            "name": TOOL_NAMES[action],
            "content": text,
            "is_error": code != 0,
            "exit_code": code,
        }
        return assistant, tool
