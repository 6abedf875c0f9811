"""Edits recovered from tool calls as unified diffs, one case per shape harnesses write."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trajlake.view import edits_of_call


def _edits(name: str, arguments: Any) -> list[dict[str, Any]]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    parsed = arguments if isinstance(arguments, dict) else None
    return edits_of_call(name, text, parsed)


def test_str_replace_editor_replacement() -> None:
    args = {
        "command": "str_replace",
        "path": "/repo/a.py",
        "old_str": "def f():\n    return 1\n",
        "new_str": "def f():\n    return 2\n",
    }
    for tool in ("str_replace_editor", "str_replace_based_edit_tool"):
        assert _edits(tool, args) == [
            {
                "kind": "str_replace",
                "path": "/repo/a.py",
                "diff": "--- a/repo/a.py\n+++ b/repo/a.py\n@@ -1,2 +1,2 @@\n def f():\n"
                "-    return 1\n+    return 2\n",
            }
        ]


def test_editor_create_insert_and_view() -> None:
    created = _edits(
        "str_replace_editor", {"command": "create", "path": "n.py", "file_text": "a\nb\n"}
    )
    assert created == [
        {
            "kind": "write",
            "path": "n.py",
            "diff": "--- a/n.py\n+++ b/n.py\n@@ -0,0 +1,2 @@\n+a\n+b\n",
        }
    ]
    inserted = _edits(
        "str_replace_editor",
        {"command": "insert", "path": "n.py", "insert_line": 10, "new_str": "c\n"},
    )
    assert inserted[0]["diff"] == "--- a/n.py\n+++ b/n.py\n@@ -10,0 +11 @@\n+c\n"
    assert _edits("str_replace_editor", {"command": "view", "path": "n.py"}) == []


def test_claude_code_edit_multiedit_write() -> None:
    edit = _edits(
        "Edit", {"file_path": "/p/x.ex", "old_string": "a", "new_string": "b", "replace_all": False}
    )
    assert edit == [
        {
            "kind": "str_replace",
            "path": "/p/x.ex",
            "diff": "--- a/p/x.ex\n+++ b/p/x.ex\n@@ -1 +1 @@\n-a\n+b\n",
        }
    ]
    multi = _edits(
        "MultiEdit",
        {
            "file_path": "y",
            "edits": [
                {"old_string": "1", "new_string": "2"},
                {"old_string": "3", "new_string": "4"},
            ],
        },
    )
    assert [e["diff"].splitlines()[-2:] for e in multi] == [["-1", "+2"], ["-3", "+4"]]
    write = _edits("Write", {"file_path": "z.md", "content": "hello\n"})
    assert write == [
        {"kind": "write", "path": "z.md", "diff": "--- a/z.md\n+++ b/z.md\n@@ -0,0 +1 @@\n+hello\n"}
    ]


CODEX_PATCH = """*** Begin Patch
*** Update File: src/app.py
@@ def main():
-    print("hi")
+    print("hello")
*** Add File: NOTES.md
+first line
*** Delete File: old.txt
*** End Patch"""


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("apply_patch", {"input": CODEX_PATCH}),
        ("apply_patch", CODEX_PATCH),
        ("shell", {"command": ["apply_patch", CODEX_PATCH]}),
    ],
)
def test_codex_apply_patch(name: str, arguments: Any) -> None:
    edits = _edits(name, arguments)
    assert [(e["kind"], e["path"]) for e in edits] == [
        ("patch", "src/app.py"),
        ("patch", "NOTES.md"),
        ("patch", "old.txt"),
    ]
    assert edits[0]["diff"] == (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ def main():\n"
        '-    print("hi")\n+    print("hello")\n'
    )
    assert edits[1]["diff"].endswith("+first line\n")
    assert edits[2]["diff"] == "--- a/old.txt\n+++ /dev/null\n"


def test_git_diff_in_a_heredoc() -> None:
    command = (
        "cd /repo && git apply <<'EOF'\ndiff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n"
        "@@ -1 +1 @@\n-x\n+y\nEOF\n"
    )
    edits = _edits("bash", {"command": command})
    assert edits == [
        {
            "kind": "patch",
            "path": "m.py",
            "diff": "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x\n+y\n",
        }
    ]


def test_sed_in_place() -> None:
    edits = _edits(
        "bash", {"command": "sed -i 's/old_name/new_name/g' src/a.py src/b.py && pytest"}
    )
    assert [(e["kind"], e["path"]) for e in edits] == [("sed", "src/a.py"), ("sed", "src/b.py")]
    assert edits[0]["diff"] == (
        "--- a/src/a.py\n+++ b/src/a.py\n@@ sed s/old_name/new_name/g @@\n-old_name\n+new_name\n"
    )
    # Other delimiters, -e scripts; a sed without -i edits nothing.
    assert _edits("execute_bash", {"command": "sed -i -e 's|a/b|c/d|' f"})[0]["diff"].endswith(
        "-a/b\n+c/d\n"
    )
    assert _edits("bash", {"command": "sed 's/a/b/' f"}) == []


def test_calls_that_edit_nothing() -> None:
    assert _edits("bash", {"command": "ls -la"}) == []
    assert _edits("Read", {"file_path": "x"}) == []
    assert _edits("str_replace_editor", "not json") == []
    assert edits_of_call("Edit", None, None) == []
