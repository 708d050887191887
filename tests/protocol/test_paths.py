"""Agent path and name rules, their exact messages, and round-trip properties."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retinue.errors import ArgumentTypeError, InvalidAgentPath, RetinueError
from retinue.protocol import paths
from retinue.protocol.paths import (
    MAX_NAME_LENGTH,
    MAX_PATH_LENGTH,
    ROOT,
    child_path,
    depth,
    derive_name,
    is_immediate_child,
    is_sound,
    join,
    name_of,
    names_sound,
    parent_of,
    resolve,
    validate,
    validate_name,
)

NAME_TOO_LONG = "task_name must be at most 40 characters"
NAME_BAD = "task_name must use lowercase letters, digits, and underscores"
START = "agent path must start with /root"
TRAILING = "agent path must not end with /"
TOO_LONG = "agent path is too long"
EMPTY = "agent path must not contain empty segments"

SETTINGS = settings(max_examples=150, derandomize=True, deadline=None)


def _raises(message: str) -> pytest.RaisesExc[InvalidAgentPath]:
    return pytest.raises(InvalidAgentPath, match=f"^{message}$")


# -- constants -----------------------------------------------------------------


def test_constants() -> None:
    assert ROOT == "/root"
    assert MAX_NAME_LENGTH == 40
    assert MAX_PATH_LENGTH == 1024


def test_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        validate_name("Bad")
    assert issubclass(InvalidAgentPath, RetinueError)


def test_wrong_type_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        validate(None)  # type: ignore[arg-type]
    assert issubclass(ArgumentTypeError, RetinueError)


# -- validate_name -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "_", "0", "a_b", "review_api", "x9", "a" * 40, "roots"])
def test_valid_names_are_returned(name: str) -> None:
    assert validate_name(name) is name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "root",
        ".",
        "..",
        "Abc",
        "aBc",
        "a-b",
        "a/b",
        "a b",
        " a",
        "a\n",
        "\na",
        "a\t",
        "é",
        "ａ",  # fullwidth a
        "١",  # Arabic-Indic digit one: a Unicode digit, not [0-9]
        "a.b",
    ],
)
def test_invalid_names(name: str) -> None:
    with _raises(NAME_BAD):
        validate_name(name)


def test_name_of_41_characters_is_too_long() -> None:
    with _raises(NAME_TOO_LONG):
        validate_name("a" * 41)


def test_name_length_is_checked_before_characters() -> None:
    with _raises(NAME_TOO_LONG):
        validate_name("A-" * 21)


@pytest.mark.parametrize("value", [None, 1, b"abc", ["a"]])
def test_validate_name_rejects_non_str(value: object) -> None:
    with pytest.raises(ArgumentTypeError):
        validate_name(value)  # type: ignore[arg-type]


# -- validate ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/root", "/root/a", "/root/a/b_c/d9", "/root/" + "a" * 40])
def test_valid_paths_are_returned_unchanged(path: str) -> None:
    assert validate(path) is path


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", START),
        ("root", START),
        ("/", START),
        ("/roo", START),
        ("/rootx", START),
        ("/root2/a", START),
        ("/a/root", START),
        ("root/a", START),
        (" /root", START),
        ("/root/", TRAILING),
        ("/root/a/", TRAILING),
        ("/root//", TRAILING),
        ("/root//a", EMPTY),
        ("/root/a//b", EMPTY),
        ("/root/A", NAME_BAD),
        ("/root/a/..", NAME_BAD),
        ("/root/./a", NAME_BAD),
        ("/root/root", NAME_BAD),
        ("/root/a b", NAME_BAD),
        ("/root/a\n", NAME_BAD),
        ("/root/" + "a" * 41, NAME_TOO_LONG),
    ],
)
def test_invalid_paths(path: str, message: str) -> None:
    with _raises(message):
        validate(path)


def _rules(path: str) -> str | None:
    """The path rules as documented, checked one by one: the first broken one's message."""
    if path == ROOT:
        return None
    if not path.startswith(ROOT + "/"):
        return START
    if path.endswith("/"):
        return TRAILING
    if len(path) > MAX_PATH_LENGTH:
        return TOO_LONG
    segments = path[len(ROOT) + 1 :].split("/")
    if "" in segments:
        return EMPTY
    for segment in segments:
        if len(segment) > MAX_NAME_LENGTH:
            return NAME_TOO_LONG
        if (
            segment == "root"
            or not segment
            or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789_" for c in segment)
        ):
            return NAME_BAD
    return None


_PIECES = st.sampled_from(["/", "root", "a", "b_9", "A", ".", " ", "\n", "a" * 40, "x" * 41])


@SETTINGS
@given(st.lists(_PIECES, max_size=12).map(lambda parts: "/root" + "".join(parts)))
def test_every_path_gets_the_verdict_of_the_rules(path: str) -> None:
    expected = _rules(path)
    if expected is None:
        assert validate(path) is path
    else:
        with _raises(expected):
            validate(path)


def _passes(check: Callable[[str], str], value: str) -> bool:
    try:
        check(value)
    except InvalidAgentPath:
        return False
    return True


@SETTINGS
@given(
    st.lists(_PIECES, max_size=12).map(lambda parts: "/root" + "".join(parts)),
    st.lists(_PIECES, max_size=3).map("".join),
)
def test_is_sound_is_true_exactly_when_path_and_name_validate(path: str, name: str) -> None:
    # The open's quick check of a stored record: the same verdict as the full checks.
    # (/root itself is a valid path but not below /root: a caller validates it in full.)
    expected = path != ROOT and _passes(validate, path) and _passes(validate_name, name)
    assert is_sound(path, name) is expected


@SETTINGS
@given(st.lists(st.lists(_PIECES, max_size=3).map("".join) | st.just("root"), max_size=6))
def test_names_sound_is_true_exactly_when_every_name_validates(names: list[str]) -> None:
    # The open's check of every stored name at once: the verdict of a check of each.
    assert names_sound(names) is all(_passes(validate_name, name) for name in names)
    assert names_sound([*names, "a" * MAX_NAME_LENGTH]) is names_sound(names)
    assert not names_sound([*names, "a" * (MAX_NAME_LENGTH + 1)])
    assert not names_sound([*names, "a\nb"])


def test_is_sound_says_false_for_what_is_not_a_str() -> None:
    assert not is_sound(b"/root/a", "a")  # type: ignore[arg-type]
    assert not is_sound("/root/a", None)  # type: ignore[arg-type]
    assert is_sound("/root/a", "a")
    assert not is_sound("/root/" + "/".join(["a" * 40] * 25), "a")  # too long


def test_long_paths_get_the_verdict_of_the_rules() -> None:
    for path in ("/root/" + "/".join(["a" * 40] * 25), "/root/" + "/".join(["ab"] * 340)):
        assert _rules(path) == TOO_LONG
        with _raises(TOO_LONG):
            validate(path)


def test_check_order_start_before_trailing_slash() -> None:
    with _raises(START):
        validate("/other/")


def test_check_order_trailing_slash_before_length() -> None:
    with _raises(TRAILING):
        validate("/root/" + "a/" * 600)


def test_check_order_length_before_empty_segments_and_names() -> None:
    with _raises(TOO_LONG):
        validate("/root//" + "A" * 1100)


def test_check_order_empty_segments_before_names() -> None:
    with _raises(EMPTY):
        validate("/root/BAD//x")


def test_first_bad_segment_decides_the_message() -> None:
    with _raises(NAME_TOO_LONG):
        validate("/root/" + "a" * 41 + "/BAD")
    with _raises(NAME_BAD):
        validate("/root/BAD/" + "a" * 41)


def _path_of_length(length: int) -> str:
    segments: list[str] = []
    size = len(ROOT)
    while size + 41 <= length:
        segments.append("a" * 40)
        size += 41
    path = ROOT + "".join("/" + s for s in segments)
    rest = length - len(path) - 1
    assert 1 <= rest <= 40
    return path + "/" + "b" * rest


def test_path_of_exactly_1024_characters_is_valid() -> None:
    path = _path_of_length(1024)
    assert len(path) == 1024
    assert validate(path) == path


def test_path_of_1025_characters_is_too_long() -> None:
    path = _path_of_length(1025)
    assert len(path) == 1025
    with _raises(TOO_LONG):
        validate(path)


@pytest.mark.parametrize("value", [None, 1, b"/root", ["/root"]])
def test_validate_rejects_non_str(value: object) -> None:
    with pytest.raises(ArgumentTypeError):
        validate(value)  # type: ignore[arg-type]


# -- join, parent_of, name_of, depth, is_immediate_child ---------------------------


def test_join() -> None:
    assert join(ROOT, "a") == "/root/a"
    assert join("/root/a", "b_1") == "/root/a/b_1"


def test_join_validates_both_and_the_result() -> None:
    with _raises(NAME_BAD):
        join(ROOT, "B")
    with _raises(NAME_BAD):
        join(ROOT, "a/b")
    with _raises(START):
        join("/x", "a")
    with _raises(TOO_LONG):
        join(_path_of_length(1020), "abcd")
    assert len(join(_path_of_length(1020), "abc")) == 1024


def test_child_path_joins_valid_parts_like_join_and_bounds_the_length() -> None:
    for parent, name in [(ROOT, "a"), ("/root/a", "b_1"), (_path_of_length(1020), "abc")]:
        assert child_path(parent, name) == join(parent, name)
    with _raises(TOO_LONG):
        child_path(_path_of_length(1020), "abcd")


def test_join_rejects_non_str() -> None:
    with pytest.raises(ArgumentTypeError):
        join(ROOT, 1)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError):
        join(None, "a")  # type: ignore[arg-type]


def test_parent_of() -> None:
    assert parent_of("/root/a") == ROOT
    assert parent_of("/root/a/b") == "/root/a"


def test_root_has_no_parent() -> None:
    with pytest.raises(InvalidAgentPath, match="no parent"):
        parent_of(ROOT)


def test_parent_of_validates() -> None:
    with _raises(TRAILING):
        parent_of("/root/a/")
    with pytest.raises(ArgumentTypeError):
        parent_of(3)  # type: ignore[arg-type]


def test_name_of() -> None:
    assert name_of("/root/a") == "a"
    assert name_of("/root/a/bc") == "bc"
    assert name_of(ROOT) == "root"
    with _raises(NAME_BAD):
        name_of("/root/A")


def test_depth() -> None:
    assert depth(ROOT) == 0
    assert depth("/root/a") == 1
    assert depth("/root/a/b/c") == 3
    with _raises(START):
        depth("/a")


@pytest.mark.parametrize(
    ("path", "parent", "expected"),
    [
        ("/root/a", "/root", True),
        ("/root/a/b", "/root/a", True),
        ("/root/a/b", "/root", False),
        ("/root", "/root", False),
        ("/root/a", "/root/a", False),
        ("/root/ab", "/root/a", False),
        ("/root/a", "/root/a/b", False),
        ("/root/b/c", "/root/a", False),
    ],
)
def test_is_immediate_child(path: str, parent: str, expected: bool) -> None:
    assert is_immediate_child(path, parent) is expected


def test_is_immediate_child_validates_both() -> None:
    with _raises(START):
        is_immediate_child("/x/a", ROOT)
    with _raises(TRAILING):
        is_immediate_child("/root/a", "/root/")
    with pytest.raises(ArgumentTypeError):
        is_immediate_child("/root/a", None)  # type: ignore[arg-type]


# -- resolve -----------------------------------------------------------------------


def test_resolve_absolute_reference_is_returned_as_is() -> None:
    assert resolve("/root/a", "/root/b/c") == "/root/b/c"
    assert resolve("/root/a/b", ROOT) == ROOT


def test_resolve_absolute_reference_is_validated() -> None:
    with _raises(START):
        resolve("/root/a", "/etc/passwd")
    with _raises(NAME_BAD):
        resolve("/root/a", "/root/../b")


def test_resolve_relative_reference_goes_below_the_sender() -> None:
    assert resolve("/root/a", "b") == "/root/a/b"
    assert resolve("/root/a", "b/c") == "/root/a/b/c"
    assert resolve(ROOT, "x") == "/root/x"


@pytest.mark.parametrize(
    "reference", ["..", ".", "../b", "./b", "b/..", "", "b/", "b//c", "B", "b c", "a\n"]
)
def test_resolve_relative_reference_cannot_escape_or_be_malformed(reference: str) -> None:
    with _raises(NAME_BAD):
        resolve("/root/a", reference)


def test_resolve_validates_sender_and_result_length() -> None:
    with _raises(START):
        resolve("/nope", "a")
    with _raises(TOO_LONG):
        resolve(_path_of_length(1020), "abcd")
    with _raises(NAME_TOO_LONG):
        resolve(ROOT, "a" * 41)


def test_resolve_rejects_non_str() -> None:
    with pytest.raises(ArgumentTypeError):
        resolve("/root/a", 1)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError):
        resolve(b"/root", "a")  # type: ignore[arg-type]


# -- derive_name -------------------------------------------------------------------


def test_derive_name_is_deterministic_valid_and_opaque() -> None:
    agent_id = "01J9ZKX4Q7AGENTID"
    name = derive_name(agent_id)
    assert name == derive_name(agent_id)
    assert validate_name(name) == name
    assert len(name) <= MAX_NAME_LENGTH
    assert agent_id.lower() not in name
    assert name == "agent_" + hashlib.sha256(agent_id.encode()).hexdigest()[:12]


def test_derive_name_differs_for_different_ids() -> None:
    names = {derive_name(f"id-{i}") for i in range(1000)}
    assert len(names) == 1000


def test_derive_name_rejects_non_str() -> None:
    with pytest.raises(ArgumentTypeError):
        derive_name(123)  # type: ignore[arg-type]


@SETTINGS
@given(st.text())
def test_derive_name_is_always_valid(agent_id: str) -> None:
    name = derive_name(agent_id)
    assert validate_name(name) == name
    assert len(name) <= MAX_NAME_LENGTH


# -- properties --------------------------------------------------------------------

names = st.from_regex(r"[a-z0-9_]{1,40}", fullmatch=True).filter(lambda n: n != "root")
segment_lists = st.lists(names, min_size=0, max_size=12)
# Characters that can never appear in a path (anything but [a-z0-9_/]).
illegal_chars = st.characters(
    exclude_characters="abcdefghijklmnopqrstuvwxyz0123456789_/", exclude_categories=["Cs"]
)


def _build(segments: list[str]) -> str:
    path = ROOT
    for segment in segments:
        path = join(path, segment)
    return path


@SETTINGS
@given(segment_lists, names)
def test_generated_paths_validate_and_round_trip(segments: list[str], name: str) -> None:
    path = _build(segments)
    assert path == ROOT + "".join("/" + s for s in segments)
    assert validate(path) == path
    assert depth(path) == len(segments)
    child = join(path, name)
    assert validate(child) == child
    assert parent_of(child) == path
    assert name_of(child) == name
    assert depth(child) == depth(path) + 1
    assert is_immediate_child(child, path)
    assert join(parent_of(child), name_of(child)) == child


@SETTINGS
@given(names, illegal_chars, st.integers(min_value=0, max_value=40))
def test_inserting_an_illegal_character_fails_name_validation(
    name: str, char: str, position: int
) -> None:
    position = min(position, len(name))
    bad = name[:position] + char + name[position:]
    with pytest.raises(InvalidAgentPath):
        validate_name(bad)


@SETTINGS
@given(st.lists(names, min_size=1, max_size=8), illegal_chars, st.data())
def test_inserting_an_illegal_character_fails_path_validation(
    segments: list[str], char: str, data: st.DataObject
) -> None:
    path = _build(segments)
    position = data.draw(st.integers(min_value=0, max_value=len(path)))
    bad = path[:position] + char + path[position:]
    with pytest.raises(InvalidAgentPath):
        validate(bad)


@SETTINGS
@given(segment_lists, st.text(alphabet="ab_./Z- \n", max_size=20))
def test_resolve_never_leaves_the_sender_subtree(segments: list[str], reference: str) -> None:
    sender = _build(segments)
    if reference.startswith("/"):
        return  # absolute references are validated as given, covered elsewhere
    try:
        resolved = resolve(sender, reference)
    except InvalidAgentPath:
        return
    assert resolved.startswith(sender + "/")
    assert resolved == sender + "/" + reference
    assert depth(resolved) > depth(sender)


@SETTINGS
@given(segment_lists, st.lists(names, min_size=1, max_size=5))
def test_resolve_valid_relative_reference(segments: list[str], below: list[str]) -> None:
    sender = _build(segments)
    resolved = resolve(sender, "/".join(below))
    assert resolved == _build(segments + below)
    assert depth(resolved) == depth(sender) + len(below)


def test_module_all_is_sorted_and_complete() -> None:
    assert paths.__all__ == sorted(paths.__all__)
    for name in paths.__all__:
        assert hasattr(paths, name)


# -- the protocol package ----------------------------------------------------------


def test_protocol_package_all_is_sorted_and_every_name_imports() -> None:
    import retinue.protocol as protocol

    assert protocol.__all__ == sorted(protocol.__all__)
    assert len(set(protocol.__all__)) == len(protocol.__all__)
    for name in protocol.__all__:
        assert getattr(protocol, name) is not None
    for name in ["ROOT", "Limits", "validate_graph", "parse_result", "truncate_utf8"]:
        assert name in protocol.__all__
    for module in ["paths", "limits", "graph", "results", "text", "checks"]:
        names = getattr(protocol, module).__all__
        assert names == sorted(names), module
        assert set(names) <= set(protocol.__all__), module


@pytest.mark.parametrize("module", ["paths", "limits", "graph", "results", "text", "checks"])
def test_protocol_modules_import_only_errors_and_each_other(module: str) -> None:
    import ast
    import importlib

    source = importlib.import_module(f"retinue.protocol.{module}").__file__
    assert source is not None
    with open(source, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.append(node.module)
    ours = [name for name in imported if name.split(".")[0] == "retinue"]
    assert ours, "expected at least the errors import"
    for name in ours:
        assert name == "retinue.errors" or name.startswith("retinue.protocol.")
    assert not {"threading", "socket", "subprocess", "asyncio"} & set(imported)
