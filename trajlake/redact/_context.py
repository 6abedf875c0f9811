"""Where a match stands: source code and test files, provenance lines, kernel paths.

Generic matches (a value under a secret-like name, a URL password, an e-mail address) are
judged by their surroundings: a password literal in a test file or a diff of one is a
fixture, an address in a copyright header is public provenance. Provider key formats never
ask for context. These checks run only on candidates, so they may look around freely.
"""

from __future__ import annotations

import re

from trajlake.redact._base import strong

_LOOKBACK = 8000
_FIELD_MARK = "\0"

# What names the file a region shows: a diff header, a file view, a command that prints or
# writes a file, a str_replace_editor call. The last one before a match names its file.
# Each pattern starts with a literal of its own: one alternation would be scanned slowly.
_ARGS = r"(?:[ \t]+(?:-[^\s'\"]*|'[^'\n]*'|\"[^\"\n]*\"))*[ \t]+['\"]?"
_PATH = r"[\w./\-]*\.[A-Za-z]{1,5}(?![\w.])"
_FILE_MARKS = tuple(
    re.compile(p, re.M)
    for p in (
        r"diff --git a/(?P<a>\S+)",
        r"^\+\+\+ b/(?P<b>\S+)",
        r"\[File: (?P<c>[^\s\]]+)",
        r"running `cat -n` on (?P<d>\S+)",
        *(
            rf"{command}(?<![\w\-]{command}){_ARGS}(?P<e>{_PATH})"  # literal first: fast scan
            for command in ("cat", "nl", "head", "tail", "sed", "less", "bat", "view", "grep")
        ),
        r"(?:path|file_path|filename)\\?\"\s*:\s*\\?\"(?P<f>[^\"\\]+)",
        rf"> *['\"]?(?P<g>{_PATH})",
        rf"tee *['\"]?(?P<g>{_PATH})",
        r"```(?P<h>[A-Za-z]+)\b",
        r"python3?(?P<i> -c | - *<<)",
    )
)
_SOURCE_EXTENSIONS = frozenset(
    (
        "py", "pyi", "pyx", "js", "jsx", "mjs", "ts", "tsx", "java", "kt", "scala", "go", "rs",
        "rb", "php", "c", "h", "cc", "cpp", "hpp", "cs", "swift", "m", "r", "jl", "lua", "pl",
        "ex", "exs", "hs", "ml", "clj", "dart", "vue", "svelte", "rst", "po",
    )
)  # fmt: skip
_CODE_FENCES = frozenset(("python", "py", "diff", "patch", "javascript", "js", "typescript",
                          "ts", "java", "go", "rust", "ruby", "php", "c", "cpp"))  # fmt: skip
_TEST_NAME = re.compile(
    r"(?:^|[/_.\-])(?:tests?|spec|specs|__tests__|fixtures?|testing)(?:[/_.\-]|$)"
)
_TEST_CODE = ("def test_", "Test(", "TestCase", "self.assert", "@pytest.", "import pytest",
              "import unittest", "from django.test", "describe(", "it('", 'it("')  # fmt: skip


def _window_start(text: str, pos: int) -> int:
    """Where the text that may say what `pos` is begins: this field and the one before."""
    low = max(0, pos - _LOOKBACK)
    here = text.rfind(_FIELD_MARK, low, pos)
    before = text.rfind(_FIELD_MARK, low, here) if here > 0 else -1
    return max(before + 1, low)


def _names_code(path: str) -> bool:
    name = path.rsplit("/", 1)[-1].lower()
    ext = name.rsplit(".", 1)[-1] if "." in name else ""
    return ext in _SOURCE_EXTENSIONS or (ext not in ("env", "") and bool(_TEST_NAME.search(path)))


def _verdict(mark: re.Match[str]) -> bool:
    """Whether a file mark says that what follows it is code."""
    kind = mark.lastgroup
    value = mark.group(kind) if kind else ""
    if kind == "i":
        return True
    if kind == "h":
        return value.lower() in _CODE_FENCES
    return bool(value) and _names_code(value)


_BLOCK = 8192
_OVERLAP = 512  # a mark straddling a block boundary is still seen whole


class _Marks:
    """The file marks of one text, found block by block, once each.

    Many candidates of one trajectory ask about nearby positions; scanning their windows
    again for each would cost more than all the detectors.
    """

    def __init__(self) -> None:
        self.text: str | None = None
        self.blocks: dict[int, list[tuple[int, int, bool]]] = {}

    def block(self, text: str, b: int) -> list[tuple[int, int, bool]]:
        if text is not self.text:
            self.text, self.blocks = text, {}
        found = self.blocks.get(b)
        if found is None:
            start, end = max(0, b * _BLOCK - _OVERLAP), (b + 1) * _BLOCK
            marks = [
                (m.start(), m.end(), _verdict(m))
                for pattern in _FILE_MARKS
                for m in pattern.finditer(text, start, end)
            ]
            found = self.blocks[b] = marks
        return found


_MARKS = _Marks()


def in_code(text: str, pos: int) -> bool:
    """Whether `pos` lies in source code or a test: a listing, a diff or a write of such a file.

    A `.env`, YAML or JSON file shown the same way is not code: its values are configuration,
    where a password is a password.
    """
    start = _window_start(text, pos)
    last: tuple[int, int, bool] | None = None
    for b in range(start // _BLOCK, pos // _BLOCK + 1):
        for mark in _MARKS.block(text, b):
            if start <= mark[0] and mark[1] <= pos and (last is None or mark[0] > last[0]):
                last = mark
    if last is not None and last[2]:
        return True
    return any(text.find(word, start, pos) >= 0 for word in _TEST_CODE)


_PROVENANCE = re.compile(
    r"copyright|\(c\)|©|spdx-|(?<![\w\-])_*author(?!ed-by)|moduleauthor|sectionauthor"
    r"|maintainer(?:_email|-email|:)|contributor|credits|translator|language[-_ ]team|__email__"
    r"|report-msgid-bugs-to"
)
_PEOPLE_TABLE = re.compile(r"(?:authors|maintainers)\s*=\s*\[[^\]]*$")
_COMMENT_LINE = re.compile(r"[ \t]*(?:\d+[:\t→]\s*)?(?:#|\*|//|;|--|%)")


def provenance(text: str, start: int) -> bool:
    """An address in a copyright, author or maintainer line: public provenance, not contact data.

    `Author:` opening a line (git log, mail headers) is not provenance: it names who did
    something in this session's repository.
    """
    low = max(0, start - 300)
    # A line ends at a newline, or at a JSON-escaped one in tool-call arguments.
    escaped = text.rfind("\\n", low, start)
    line_start = max(low, text.rfind("\n", low, start) + 1, escaped + 2 if escaped >= 0 else 0)
    prefix = text[line_start:start]
    if prefix.startswith("Author: "):
        return False
    if _PROVENANCE.search(prefix.lower()):
        return True
    block = text[max(0, line_start - 600) : line_start]
    if ("authors" in block or "maintainers" in block) and _PEOPLE_TABLE.search(block):
        return True  # an entry of `authors = [...]` in pyproject.toml
    # A continuation of a comment block that began with `Authors:` a few lines up.
    if _COMMENT_LINE.match(prefix):
        return "Author" in block or "Copyright" in block or "copyright" in block
    return False


def in_path(text: str, name_start: int) -> bool:
    """The key name is a path component (`/proc/sys/.../stable_secret: ...`), not a key."""
    return name_start > 0 and text[name_start - 1] == "/"


_FIXTURE_WORDS = (
    "pass", "secret", "test", "some", "fake", "mock", "wrong", "dummy", "sample", "demo",
    "hunter", "qwerty", "letmein", "admin", "user", "word", "abc", "123", "insecure", "foo",
    "bar", "key", "token", "sésame",
)  # fmt: skip


def weak(value: str) -> bool:
    """A value a person chose to look like a password (`password123`, `some:secret`)."""
    low = value.lower()
    return not strong(value) or any(w in low for w in _FIXTURE_WORDS)


def fixture(text: str, pos: int, value: str) -> bool:
    """A weak value in source code or a test: a fixture, not a credential."""
    return weak(value) and in_code(text, pos)
