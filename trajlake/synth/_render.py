"""Text of the synthetic environment: fake repositories and OpenAI-style chat turns with tool calls.

Rendering never changes the dynamics: the abstract rollout fixes what happens, and the text
(file listings, grep hits, diffs, pytest output) is drawn consistently with it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from trajlake.synth._model import Action, State

_PACKAGES = ["confkit", "datapipe", "tinyhttp", "fluxcache", "geomlib", "wrapx", "taskq", "logly"]
_MODULES = [
    "config", "parser", "cache", "utils", "io", "models", "views", "cli", "schema", "loader",
    "render", "client", "session", "events", "registry", "storage",
]  # fmt: skip
_VERBS = ["load", "parse", "resolve", "build", "merge", "read", "normalize", "validate"]
_NOUNS = ["settings", "options", "headers", "entries", "record", "payload", "profile", "layout"]
_KEYS = ["timeout", "retries", "encoding", "base_url", "max_size", "locale", "verbose", "mode"]
_ERRORS = ["KeyError", "TypeError", "AttributeError"]
_FILLER = [
    "value = {noun}.get(name)", "if value is None:", "    continue", "result.append(value)",
    "logger.debug('%s', name)", "return result", "items = sorted(items)", "seen = set()",
    "for name in names:", "return dict(defaults, **overrides)", "raise ValueError(name)",
]  # fmt: skip

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
        ("grep", "Search the repository for a pattern.", ("pattern", "path")),
        ("read_file", "Show a file with line numbers.", ("path",)),
        ("edit_file", "Replace old_str with new_str in a file.", ("path", "old_str", "new_str")),
        ("run_tests", "Run the test suite (or part of it) with pytest.", ("command",)),
        ("submit", "Submit the current diff as the final patch.", ()),
    ]
]
TOOL_NAMES: dict[Action, str] = {
    "grep": "grep",
    "read": "read_file",
    "edit": "edit_file",
    "run_tests": "run_tests",
    "submit": "submit",
}


@dataclass(frozen=True)
class RepoSpec:
    """A fake repository with one buggy function (hidden from the policy)."""

    task_id: str
    package: str
    files: tuple[str, ...]
    sources: tuple[tuple[str, ...], ...]
    """Source lines of each file."""
    buggy: int
    """Index of the buggy file."""
    bug_line: int
    """0-based line of the bug in the buggy file."""
    function: str
    key: str
    error: str
    fixed: str
    wrong: str

    @property
    def issue(self) -> str:
        """The task statement shown to the agent."""
        return (
            f"<issue>\n`{self.package}.{self.function}()` raises `{self.error}` when the "
            f"`{self.key}` option is not given, e.g. `{self.function}({{}})`. It should fall back "
            f"to the documented default instead.\n</issue>"
        )

    def test_file(self, i: int) -> str:
        """The test module of file `i`."""
        return f"tests/test_{self.files[i].rsplit('/', 1)[1]}"


def make_repo(rng: random.Random, task_id: str, n_files: int) -> RepoSpec:
    """Draw a fake repository of `n_files` modules."""
    package = rng.choice(_PACKAGES)
    modules = rng.sample(_MODULES, min(n_files, len(_MODULES)))
    modules += [f"mod{i}" for i in range(len(modules), n_files)]
    function = f"{rng.choice(_VERBS)}_{rng.choice(_NOUNS)}"
    key, error = rng.choice(_KEYS), rng.choice(_ERRORS)
    sources = []
    for m in modules:
        noun = rng.choice(_NOUNS)
        lines = [f'"""{m.title()} helpers of {package}."""', "", "import logging", ""]
        for _ in range(rng.randint(2, 4)):
            lines += [f"def {rng.choice(_VERBS)}_{noun}(names, {noun}):", "    result = []"]
            lines += [
                "    " + rng.choice(_FILLER).format(noun=noun) for _ in range(rng.randint(3, 8))
            ]
            lines += ["    return result", ""]
        sources.append(lines)
    buggy = rng.randrange(n_files)
    bug_line = len(sources[buggy]) + 2
    sources[buggy] += [f"def {function}(options):", "    config = dict(options)"]
    sources[buggy] += [f"    value = config[{key!r}]", "    return value", ""]
    return RepoSpec(
        task_id=task_id,
        package=package,
        files=tuple(f"src/{package}/{m}.py" for m in modules),
        sources=tuple(tuple(s) for s in sources),
        buggy=buggy,
        bug_line=bug_line,
        function=function,
        key=key,
        error=error,
        fixed=f"    value = config.get({key!r}, DEFAULTS[{key!r}])",
        wrong=rng.choice(
            [f"    value = config.get({key!r})", f"    value = config.get({key!r}, 0)"]
        ),
    )


def _listing(lines: tuple[str, ...] | list[str], start: int = 0) -> str:
    return "\n".join(f"{start + i + 1:6d}\t{line}" for i, line in enumerate(lines))


_THOUGHTS: dict[Action, list[str]] = {
    "grep": [
        "Let me search the code base for where this is handled.",
        "I'll grep for the relevant names to find the code path.",
    ],
    "read": [
        "Let me look at this module to understand the logic.",
        "I'll open the file and read the implementation.",
    ],
    "edit": [
        "I think I see the problem; let me change the lookup so it falls back to a default.",
        "Let me apply a fix here.",
    ],
    "run_tests": [
        "Let me run the tests to check the behaviour.",
        "Running the test suite to see what fails.",
    ],
    "submit": ["The change looks complete; submitting.", "I'm done with the fix, submitting it."],
}


class TurnRenderer:
    """Renders one rollout's turns as chat messages, keeping the patch and token counts."""

    def __init__(self, repo: RepoSpec, rng: random.Random) -> None:
        self.repo = repo
        self.rng = rng
        self.edits: dict[tuple[int, int], tuple[str, str]] = {}
        """(file, 1-based line) -> (original, current) text of every edited line."""

    @property
    def patch(self) -> str:
        """The diff of all edits so far (the submitted patch)."""
        hunks = []
        for (i, line), (orig, cur) in sorted(self.edits.items()):
            path = self.repo.files[i]
            hunks.append(
                f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
                f"@@ -{line},1 +{line},1 @@\n-{orig}\n+{cur}\n"
            )
        return "".join(hunks)

    def _source(self, i: int) -> list[str]:
        lines = list(self.repo.sources[i])
        for (j, line), (_, cur) in self.edits.items():
            if j == i:
                lines[line - 1] = cur
        return lines

    def _other(self) -> int:
        others = [i for i in range(len(self.repo.files)) if i != self.repo.buggy]
        return self.rng.choice(others) if others else self.repo.buggy

    def call(self, action: Action, before: State, after: State) -> tuple[dict[str, Any], str, int]:
        """(arguments, observation text, exit code) of `action` taking `before` to `after`."""
        repo, rng = self.repo, self.rng
        found = after[0] == 1
        if action == "grep":
            if found:
                path = repo.files[repo.buggy]
                hits = [f"{path}:{repo.bug_line + 1}:{self._source(repo.buggy)[repo.bug_line]}"]
                hits.append(f"{repo.test_file(repo.buggy)}:12:    assert {repo.function}({{}})")
                return {"pattern": repo.key, "path": "."}, "\n".join(hits), 0
            i = self._other()
            noun = rng.choice(_NOUNS)
            text = f"{repo.files[i]}:{rng.randint(5, 30)}:    value = {noun}.get(name)"
            return {"pattern": f"{noun}.get", "path": "src/"}, text, 0
        if action == "read":
            i = repo.buggy if found else self._other()
            return {"path": repo.files[i]}, _listing(self._source(i)), 0
        if action == "edit":
            i = repo.buggy if before[0] == 1 or after[1] == 2 else self._other()
            if i == repo.buggy:
                line = repo.bug_line + 1
                new = repo.fixed if after[1] == 2 else repo.wrong
            else:
                line = rng.randrange(4, len(repo.sources[i]))
            old = self._source(i)[line - 1]
            if i != repo.buggy:
                new = old.replace("name", "key") if "name" in old else old + "  # default"
            self.edits[(i, line)] = (self.edits.get((i, line), (old, old))[0], new)
            path = repo.files[i]
            text = f"The file {path} has been edited. Snippet of the result:\n" + _listing(
                [new], line - 1
            )
            return {"path": path, "old_str": old, "new_str": new}, text, 0
        if action == "run_tests":
            target = repo.test_file(repo.buggy) if before[0] else "tests/"
            args = {"command": f"python -m pytest -q {target}"}
            n = rng.randint(8, 60)
            secs = f"{rng.uniform(0.2, 3.0):.2f}s"
            if after[2] == 2:
                return args, f"{'.' * n}  [100%]\n{n} passed in {secs}", 0
            test = f"{repo.test_file(repo.buggy)}::test_{repo.function}_default"
            where = (
                f"{repo.files[repo.buggy]}:{repo.bug_line + 1}: in {repo.function}\n"
                f"{self._source(repo.buggy)[repo.bug_line]}\n"
                if found
                else ""
            )
            text = (
                f"{'.' * (n - 1)}F  [100%]\n=== FAILURES ===\n"
                f"___ test_{repo.function}_default ___\n"
                f"{where}E   {repo.error}: {repo.key!r}\n"
                f"=== short test summary info ===\nFAILED {test} - {repo.error}\n"
                f"1 failed, {n - 1} passed in {secs}"
            )
            return args, text, 1
        return {}, "Patch submitted for evaluation.", 0

    def turn(
        self, t: int, action: Action, before: State, after: State, obs: str
    ) -> list[dict[str, Any]]:
        """The assistant message and its tool message for turn `t`."""
        args, text, code = self.call(action, before, after)
        call_id = f"call_{self.repo.task_id.rsplit('-', 1)[1]}_{t}_{self.rng.randrange(10**6):06d}"
        name = TOOL_NAMES[action]
        thought = self.rng.choice(_THOUGHTS[action])
        arguments = json.dumps(args)
        assistant = {
            "role": "assistant",
            "content": thought,
            "tool_calls": [
                {"id": call_id, "name": name, "arguments": arguments, "type": "function"}
            ],
            "completion_tokens": 12
            + len(thought) // 4
            + len(arguments) // 4
            + self.rng.randint(0, 40),
            "finish_reason": "tool_calls",
            "attrs": {"synth": {"state": obs, "action": action}},
        }
        tool = {
            "role": "tool",
            "tool_call_id": call_id,
            "name": name,
            "content": text,
            "is_error": code != 0,
            "exit_code": code,
        }
        return [assistant, tool]
