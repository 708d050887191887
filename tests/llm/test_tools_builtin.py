"""Built-in workspace tools: confinement (.., absolute, symlinks out), bounds, errors as results."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import wait_until

from retinue.errors import ConfigurationError
from retinue.llm import ToolBox, Workspace
from retinue.llm.tools._builtins import builtin_tools
from retinue.llm.tools._workspace import WorkspaceEscape
from retinue.protocol.tools import MODIFY_TOOLS, READ_TOOLS


def make_tree(tmp_path: Path) -> Path:
    """Build a workspace with files and folders, a secret beside it and symlinks in and out."""
    ws = tmp_path / "ws"
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "README.md").write_text("# Demo\nhello world\n")
    (ws / "src" / "app.py").write_text("import os\n\ndef main():\n    return 'hello'\n")
    (ws / "src" / "pkg" / "util.py").write_text("HELLO = 1\n")
    (ws / "blob.bin").write_bytes(b"\x00\x01\x02hello")
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("hello from git\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("hello secret\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "more.txt").write_text("hello outside\n")
    os.symlink(secret, ws / "leak.txt")
    os.symlink(tmp_path / "outside", ws / "leakdir")
    os.symlink(ws / "src" / "app.py", ws / "inside_link.py")
    return ws


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A fresh workspace (see :func:`make_tree`)."""
    return make_tree(tmp_path)


def box_for(ws: Path, names: tuple[str, ...] = MODIFY_TOOLS, **options: Any) -> ToolBox:
    return ToolBox(builtin_tools(Workspace(ws), frozenset(names), **options))


def call(box: ToolBox, name: str, **arguments: Any) -> dict[str, Any]:
    text = asyncio.run(box.call(name, json.dumps(arguments)))
    result: dict[str, Any] = json.loads(text)
    return result


def error_of(box: ToolBox, name: str, **arguments: Any) -> str:
    result = call(box, name, **arguments)
    assert set(result) == {"error"}, result
    assert "Traceback" not in result["error"]
    return str(result["error"])


# -- the presets ---------------------------------------------------------------------


def test_read_preset_offers_only_read_tools(tree: Path) -> None:
    box = box_for(tree, READ_TOOLS)
    assert box.names == list(READ_TOOLS)
    assert "unknown tool 'write_file'" in error_of(box, "write_file", path="x", content="y")


def test_modify_preset_offers_every_builtin_in_order(tree: Path) -> None:
    assert box_for(tree).names == list(MODIFY_TOOLS)


def test_workspace_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not an existing folder"):
        Workspace(tmp_path / "missing")


# -- confinement ---------------------------------------------------------------------

ESCAPES = [
    ("../secret.txt", "'..'"),
    ("src/../../secret.txt", "'..'"),
    ("..", "'..'"),
    ("/etc/passwd", "absolute"),
    ("~/secret.txt", "absolute"),
    ("leak.txt", "outside the workspace"),
    ("leakdir/more.txt", "outside the workspace"),
    ("leakdir", "outside the workspace"),
    ("a\x00b", "NUL"),
]


@pytest.mark.parametrize(("path", "why"), ESCAPES)
def test_every_path_tool_refuses_escapes(tree: Path, path: str, why: str) -> None:
    box = box_for(tree)
    for name, extra in [
        ("read_file", {}),
        ("list_dir", {}),
        ("grep", {"pattern": "hello"}),
        ("find", {"pattern": "*"}),
        ("write_file", {"content": "pwned"}),
        ("edit_file", {"old_text": "hello", "new_text": "pwned"}),
    ]:
        message = error_of(box, name, path=path, **extra)
        assert why in message, (name, message)
    assert (tree.parent / "secret.txt").read_text() == "hello secret\n"
    assert (tree.parent / "outside" / "more.txt").read_text() == "hello outside\n"


def test_write_through_a_symlink_out_creates_nothing_outside(tree: Path) -> None:
    box = box_for(tree)
    error_of(box, "write_file", path="leakdir/new.txt", content="x")
    assert not (tree.parent / "outside" / "new.txt").exists()


def test_symlink_inside_the_workspace_is_followed(tree: Path) -> None:
    result = call(box_for(tree), "read_file", path="inside_link.py")
    assert result["path"] == "src/app.py"
    assert "def main" in result["content"]


def test_workspace_resolve_keeps_paths_inside(tree: Path) -> None:
    ws = Workspace(tree)
    assert ws.resolve("") == ws.root
    assert ws.resolve("./src//app.py") == ws.root / "src" / "app.py"
    assert ws.resolve("new/deeper.txt") == ws.root / "new" / "deeper.txt"
    with pytest.raises(WorkspaceEscape):
        ws.resolve("src/../../x")


def test_search_tools_never_follow_symlinks_out(tree: Path) -> None:
    box = box_for(tree)
    found = call(box, "grep", pattern="hello")
    paths = {m["path"] for m in found["matches"]}
    assert paths == {"README.md", "src/app.py"}  # inside_link.py shows as its target
    assert all("secret" not in m["text"] and "outside" not in m["text"] for m in found["matches"])
    listed = call(box, "find", pattern="*")["paths"]
    assert "leakdir/more.txt" not in listed and "leak.txt" not in listed
    assert ".git/config" not in listed  # version-control folders are skipped


# -- reading -------------------------------------------------------------------------


def test_read_file_by_lines(tree: Path) -> None:
    box = box_for(tree)
    whole = call(box, "read_file", path="src/app.py")
    assert whole == {
        "path": "src/app.py",
        "content": "import os\n\ndef main():\n    return 'hello'\n",
        "first_line": 1,
        "last_line": 4,
        "total_lines": 4,
        "truncated": False,
    }
    part = call(box, "read_file", path="src/app.py", offset=3, limit=1)
    assert (part["content"], part["last_line"], part["truncated"]) == ("def main():\n", 3, True)


def test_read_file_is_cut_at_the_output_bound(tree: Path) -> None:
    (tree / "big.txt").write_text("é" * 10_000)
    result = call(box_for(tree, max_output_bytes=1000), "read_file", path="big.txt")
    assert result["truncated"] is True
    assert len(result["content"].encode()) <= 1000
    assert result["content"].endswith("…[truncated]")


def test_read_file_never_holds_a_huge_line_or_counts_a_huge_file(tree: Path) -> None:
    (tree / "one_line.txt").write_bytes(b"y" * (3 * 1024 * 1024))  # no newline at all
    single = call(box_for(tree, max_output_bytes=1000), "read_file", path="one_line.txt")
    assert (single["total_lines"], single["last_line"], single["truncated"]) == (1, 1, True)
    assert len(single["content"].encode()) <= 1000
    with (tree / "long.log").open("wb") as handle:
        handle.write(b"first\nsecond\n" + b"filler line\n" * (17 * 1024 * 1024 // 12))
    head = call(box_for(tree), "read_file", path="long.log", limit=2)
    assert head["content"] == "first\nsecond\n"
    assert (head["last_line"], head["total_lines"], head["truncated"]) == (2, None, True)


def test_read_file_past_the_end_and_without_final_newline(tree: Path) -> None:
    (tree / "short.txt").write_text("a\nb")
    whole = call(box_for(tree), "read_file", path="short.txt")
    assert (whole["content"], whole["total_lines"], whole["truncated"]) == ("a\nb", 2, False)
    past = call(box_for(tree), "read_file", path="short.txt", offset=5)
    assert (past["content"], past["last_line"], past["total_lines"]) == ("", None, 2)
    empty = tree / "empty.txt"
    empty.write_text("")
    nothing = call(box_for(tree), "read_file", path="empty.txt")
    assert (nothing["content"], nothing["total_lines"], nothing["truncated"]) == ("", 0, False)


@pytest.mark.parametrize(
    ("path", "why"),
    [("missing.txt", "does not exist"), ("src", "is a folder"), ("blob.bin", "binary")],
)
def test_read_file_errors(tree: Path, path: str, why: str) -> None:
    assert why in error_of(box_for(tree), "read_file", path=path)


def test_list_dir(tree: Path) -> None:
    result = call(box_for(tree), "list_dir", path=".")
    entries = {e["name"]: e for e in result["entries"]}
    assert entries["README.md"] == {"name": "README.md", "type": "file", "size": 19}
    assert entries["src"]["type"] == "dir"
    assert entries["leak.txt"]["type"] == "symlink"
    assert [e["name"] for e in result["entries"]] == sorted(entries)
    assert call(box_for(tree), "list_dir")["path"] == "."  # path defaults to the workspace
    assert "is a file" in error_of(box_for(tree), "list_dir", path="README.md")


def test_grep_options_and_bounds(tree: Path) -> None:
    box = box_for(tree)
    one = call(box, "grep", pattern="^hello", path="README.md")
    assert one["matches"] == [{"path": "README.md", "line": 2, "text": "hello world"}]
    py = call(box, "grep", pattern="hello", glob="*.py", ignore_case=True)
    assert {m["path"] for m in py["matches"]} == {"src/app.py", "src/pkg/util.py"}
    capped = call(box, "grep", pattern="o", max_results=2)
    assert len(capped["matches"]) == 2 and capped["truncated"] is True
    assert "not a valid regular expression" in error_of(box, "grep", pattern="(")


def test_find_by_name_and_by_path(tree: Path) -> None:
    box = box_for(tree)
    assert call(box, "find", pattern="*.py")["paths"] == [
        "inside_link.py",
        "src/app.py",
        "src/pkg/util.py",
    ]
    assert call(box, "find", pattern="src/*")["paths"] == [
        "src/pkg/",
        "src/app.py",
        "src/pkg/util.py",
    ]
    assert call(box, "find", pattern="*.py", path="src/pkg")["paths"] == ["src/pkg/util.py"]


# -- writing -------------------------------------------------------------------------


def test_write_file_creates_folders_and_reports(tree: Path) -> None:
    box = box_for(tree)
    made = call(box, "write_file", path="out/new/notes.md", content="héllo\n")
    assert made == {"path": "out/new/notes.md", "bytes": 7, "created": True}
    assert (tree / "out" / "new" / "notes.md").read_text() == "héllo\n"
    again = call(box, "write_file", path="out/new/notes.md", content="x")
    assert again["created"] is False
    assert "is a folder" in error_of(box, "write_file", path="src", content="x")


def test_edit_file_replaces_exactly_one_or_all(tree: Path) -> None:
    box = box_for(tree)
    (tree / "e.txt").write_text("a b a b a\n")
    assert "occurs 3 times" in error_of(box, "edit_file", path="e.txt", old_text="a", new_text="z")
    assert "not found" in error_of(box, "edit_file", path="e.txt", old_text="q", new_text="z")
    one = call(box, "edit_file", path="e.txt", old_text="a b a", new_text="X")
    assert one == {"path": "e.txt", "replacements": 1}
    assert (tree / "e.txt").read_text() == "X b a\n"
    every = call(box, "edit_file", path="e.txt", old_text=" ", new_text="_", replace_all=True)
    assert every["replacements"] == 2
    assert (tree / "e.txt").read_text() == "X_b_a\n"


# -- bash ----------------------------------------------------------------------------


def test_bash_runs_in_the_workspace_with_exit_code_and_streams(tree: Path) -> None:
    result = call(box_for(tree), "bash", command="pwd; ls src; echo oops >&2; exit 3")
    assert result["exit_code"] == 3
    assert result["stdout"].splitlines() == [str(tree.resolve()), "app.py", "pkg"]
    assert result["stderr"] == "oops\n"
    assert (result["timed_out"], result["truncated"]) == (False, False)


def test_bash_does_not_pass_on_the_hosts_secrets(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RETINUE_TEST_SECRET", "s3cret")
    box = box_for(tree, bash_env={"GREETING": "hi"})
    result = call(box, "bash", command='echo "[$RETINUE_TEST_SECRET][$GREETING]"')
    assert result["stdout"] == "[][hi]\n"


def _gone(pid: int) -> bool:
    """Return whether process ``pid`` is dead (gone, or a zombie nobody reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_bash_timeout_kills_the_whole_process_group(tree: Path) -> None:
    command = "sleep 300 & echo $! > bg.pid; sleep 300"
    result = call(box_for(tree), "bash", command=command, timeout_s=1.0)
    assert result["timed_out"] is True
    assert result["exit_code"] is None
    assert "timeout" in result["error"]
    # The background child was in the killed group too.
    background = int((tree / "bg.pid").read_text())
    wait_until(lambda: _gone(background), what=f"background process {background} killed")


def test_bash_default_timeout_comes_from_the_options(tree: Path) -> None:
    result = call(box_for(tree, bash_timeout_s=0.2), "bash", command="sleep 10")
    assert result["timed_out"] is True


def test_bash_output_is_capped_keeping_start_and_end(tree: Path) -> None:
    command = "echo START; head -c 200000 /dev/zero | tr '\\0' x; echo; echo END"
    result = call(box_for(tree, max_output_bytes=1000), "bash", command=command)
    out = result["stdout"]
    assert result["truncated"] is True
    assert out.startswith("START\n") and out.endswith("END\n")
    assert "bytes cut]" in out
    assert len(out.encode()) < 1100
    assert result["exit_code"] == 0


@pytest.mark.parametrize(
    ("arguments", "field"),
    [({"command": ""}, "command"), ({"command": "true", "timeout_s": 0}, "timeout_s"),
     ({"command": "true", "timeout_s": 601}, "timeout_s"), ({}, "command")],
)  # fmt: skip
def test_bash_arguments_are_checked(tree: Path, arguments: dict[str, Any], field: str) -> None:
    message = error_of(box_for(tree), "bash", **arguments)
    assert f"`{field}`" in message


SEGMENTS = ["..", ".", "", "src", "pkg", "leakdir", "leak.txt", "inside_link.py", "x", "~", "/"]


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=6), st.booleans())
def test_resolved_paths_never_leave_the_workspace(
    tree_once: Path, parts: list[str], absolute: bool
) -> None:
    ws = Workspace(tree_once)
    path = ("/" if absolute else "") + "/".join(parts)
    try:
        real = ws.resolve(path)
    except WorkspaceEscape:
        return
    assert ws.contains(real.resolve())
    assert not absolute and ".." not in parts


@pytest.fixture(scope="module")
def tree_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``tree`` workspace, built once for the property test."""
    return make_tree(tmp_path_factory.mktemp("prop"))
