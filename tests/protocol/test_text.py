"""UTF-8-safe truncation and safe terminal text."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retinue.errors import ArgumentTypeError, InvalidArgument
from retinue.protocol.text import (
    HEAD_TRUNCATION_MARKER,
    TAIL_TRUNCATION_MARKER,
    bounded_text,
    safe_terminal_text,
    storable_text,
    truncate_utf8,
    truncate_utf8_tail,
)

SETTINGS = settings(max_examples=200, derandomize=True, deadline=None)
Truncate = Callable[[str, int], tuple[str, bool]]


def size(text: str) -> int:
    return len(text.encode("utf-8"))


def test_markers() -> None:
    assert HEAD_TRUNCATION_MARKER == "…[truncated]"
    assert TAIL_TRUNCATION_MARKER == "[truncated]…"
    assert size(HEAD_TRUNCATION_MARKER) == size(TAIL_TRUNCATION_MARKER) == 14


# -- truncate_utf8 -----------------------------------------------------------------


def test_head_text_that_fits_is_unchanged() -> None:
    assert truncate_utf8("hello", 5) == ("hello", False)
    assert truncate_utf8("hello", 100) == ("hello", False)
    assert truncate_utf8("", 0) == ("", False)
    assert truncate_utf8("€", 3) == ("€", False)


def test_head_truncation_keeps_the_start_and_marks_it() -> None:
    text = "abcdefghijklmnopqrstuvwxyz"
    assert truncate_utf8(text, 20) == ("abcdef…[truncated]", True)
    assert truncate_utf8(text, 14) == ("…[truncated]", True)


def test_head_truncation_never_splits_a_character() -> None:
    text = "€" * 10  # 3 bytes each
    assert truncate_utf8(text, 14 + 5) == ("€…[truncated]", True)
    assert truncate_utf8(text, 14 + 6) == ("€€…[truncated]", True)
    assert truncate_utf8(text, 14 + 2) == ("…[truncated]", True)


def test_head_limit_smaller_than_the_marker_gives_part_of_the_marker() -> None:
    text = "x" * 100
    assert truncate_utf8(text, 0) == ("", True)
    assert truncate_utf8(text, 2) == ("", True)  # "…" is 3 bytes: none of it fits
    assert truncate_utf8(text, 3) == ("…", True)
    assert truncate_utf8(text, 5) == ("…[t", True)
    assert truncate_utf8(text, 13) == ("…[truncated", True)


# -- truncate_utf8_tail ------------------------------------------------------------


def test_tail_text_that_fits_is_unchanged() -> None:
    assert truncate_utf8_tail("hello", 5) == ("hello", False)
    assert truncate_utf8_tail("", 0) == ("", False)


def test_tail_truncation_keeps_the_end_and_marks_it() -> None:
    text = "abcdefghijklmnopqrstuvwxyz"
    assert truncate_utf8_tail(text, 20) == ("[truncated]…uvwxyz", True)
    assert truncate_utf8_tail(text, 14) == ("[truncated]…", True)


def test_tail_truncation_never_splits_a_character() -> None:
    text = "€" * 10
    assert truncate_utf8_tail(text, 14 + 5) == ("[truncated]…€", True)
    assert truncate_utf8_tail(text, 14 + 2) == ("[truncated]…", True)


def test_tail_limit_smaller_than_the_marker_gives_part_of_the_marker() -> None:
    text = "x" * 100
    assert truncate_utf8_tail(text, 0) == ("", True)
    assert truncate_utf8_tail(text, 5) == ("[trun", True)
    assert truncate_utf8_tail(text, 13) == ("[truncated]", True)  # "…" does not fit


# -- shared argument rules ---------------------------------------------------------


@pytest.mark.parametrize("truncate", [truncate_utf8, truncate_utf8_tail])
def test_negative_limit_is_refused(truncate: Truncate) -> None:
    with pytest.raises(InvalidArgument):
        truncate("abc", -1)
    with pytest.raises(ValueError):
        truncate("", -5)


@pytest.mark.parametrize("truncate", [truncate_utf8, truncate_utf8_tail])
def test_wrong_argument_types(truncate: Truncate) -> None:
    with pytest.raises(ArgumentTypeError):
        truncate(b"abc", 3)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError):
        truncate("abc", 3.0)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError):
        truncate("abc", True)


@pytest.mark.parametrize("truncate", [truncate_utf8, truncate_utf8_tail])
def test_lone_surrogates_are_replaced(truncate: Truncate) -> None:
    result, truncated = truncate("a\ud800b", 100)
    assert (result, truncated) == ("a\ufffdb", False)
    result, truncated = truncate("\udc00" * 50, 20)
    assert truncated
    assert size(result) <= 20


class _Text(str):
    """A str subclass (the head comes back a plain str)."""


@SETTINGS
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=40), st.integers(0, 50))
def test_an_ascii_text_within_the_limit_comes_back_as_it_is(text: str, max_bytes: int) -> None:
    result, truncated = truncate_utf8(text, max_bytes)
    assert truncated is (len(text) > max_bytes)
    if not truncated:
        assert result is text  # one byte per character: nothing encoded to say it fits
    subclassed, _ = truncate_utf8(_Text(text), max_bytes)
    assert subclassed == result and type(subclassed) is str
    with pytest.raises(ArgumentTypeError):
        truncate_utf8(text, True)


# -- truncation properties ---------------------------------------------------------

limits = st.integers(min_value=0, max_value=120)
texts = st.text(max_size=80) | st.text(alphabet="a€😀é\n", max_size=60)
# Any code point, lone surrogates included.
any_chars = st.characters() | st.characters(categories=["Cs"])


@SETTINGS
@given(texts, limits)
def test_head_truncation_properties(text: str, max_bytes: int) -> None:
    result, truncated = truncate_utf8(text, max_bytes)
    encoded = result.encode("utf-8")  # always encodes
    assert encoded.decode("utf-8") == result
    assert len(encoded) <= max_bytes
    assert truncated == (size(text) > max_bytes)
    if not truncated:
        assert result == text
    elif max_bytes >= size(HEAD_TRUNCATION_MARKER):
        assert result.endswith(HEAD_TRUNCATION_MARKER)
        kept = result.removesuffix(HEAD_TRUNCATION_MARKER)
        assert text.startswith(kept)
        # Nothing more would have fitted: the next character is too big.
        assert size(kept) + size(text[len(kept)]) > max_bytes - size(HEAD_TRUNCATION_MARKER)
    else:
        assert HEAD_TRUNCATION_MARKER.startswith(result)


@SETTINGS
@given(texts, limits)
def test_tail_truncation_properties(text: str, max_bytes: int) -> None:
    result, truncated = truncate_utf8_tail(text, max_bytes)
    encoded = result.encode("utf-8")
    assert encoded.decode("utf-8") == result
    assert len(encoded) <= max_bytes
    assert truncated == (size(text) > max_bytes)
    if not truncated:
        assert result == text
    elif max_bytes >= size(TAIL_TRUNCATION_MARKER):
        assert result.startswith(TAIL_TRUNCATION_MARKER)
        kept = result.removeprefix(TAIL_TRUNCATION_MARKER)
        assert text.endswith(kept)
        previous = text[len(text) - len(kept) - 1]
        assert size(kept) + size(previous) > max_bytes - size(TAIL_TRUNCATION_MARKER)
    else:
        assert TAIL_TRUNCATION_MARKER.startswith(result)


@SETTINGS
@given(st.text(alphabet=any_chars, max_size=40), limits)
def test_truncation_always_encodes_even_with_surrogates(text: str, max_bytes: int) -> None:
    for truncate in (truncate_utf8, truncate_utf8_tail):
        result, _ = truncate(text, max_bytes)
        assert len(result.encode("utf-8")) <= max_bytes


# -- safe_terminal_text ------------------------------------------------------------


def test_newline_and_tab_are_kept_and_carriage_returns_removed() -> None:
    assert safe_terminal_text("a\r\nb\tc\rd", 100) == "a\nb\tcd"


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x08", "\x0b", "\x0c", "\x1b", "\x7f", "\x85"])
def test_control_characters_become_question_marks(char: str) -> None:
    assert safe_terminal_text(f"a{char}b", 100) == "a?b"


def test_escape_sequence_is_defused() -> None:
    assert safe_terminal_text("\x1b[2J\x1b]0;title\x07ok", 100) == "?[2J?]0;title?ok"


def test_bidi_overrides_are_defused() -> None:
    assert safe_terminal_text("a\u202eb\u2066c", 100) == "a?b?c"


def test_ordinary_unicode_is_kept() -> None:
    text = "héllo, wörld: 👍 日本語 e\u0301"
    assert safe_terminal_text(text, 100) == text


def test_cut_to_max_chars_after_cleaning() -> None:
    assert safe_terminal_text("abcdef", 3) == "abc"
    assert safe_terminal_text("\r\r\rabcdef", 3) == "abc"
    assert safe_terminal_text("abc", 0) == ""
    assert safe_terminal_text("ab", 10) == "ab"


def test_safe_terminal_text_argument_rules() -> None:
    with pytest.raises(InvalidArgument):
        safe_terminal_text("a", -1)
    with pytest.raises(ArgumentTypeError):
        safe_terminal_text(None, 3)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError):
        safe_terminal_text("a", "3")  # type: ignore[arg-type]


@SETTINGS
@given(st.text(alphabet=any_chars, max_size=80), st.integers(0, 100))
def test_safe_terminal_text_properties(text: str, max_chars: int) -> None:
    result = safe_terminal_text(text, max_chars)
    assert len(result) <= max_chars
    assert "\r" not in result
    for char in result:
        category = unicodedata.category(char)
        assert char in "\n\t" or category not in ("Cc", "Cs")
    result.encode("utf-8")  # printable on a UTF-8 terminal
    expected_length = min(max_chars, len(text.replace("\r", "")))
    assert len(result) == expected_length


def test_bounded_text_keeps_ascii_within_the_bound_and_cuts_the_rest() -> None:
    assert bounded_text("done", 4) == "done"
    assert bounded_text("", 0) == ""
    assert bounded_text("done!", 4) == truncate_utf8("done!", 4)[0]  # one byte over: cut
    assert bounded_text("é", 1) == truncate_utf8("é", 1)[0]  # 1 character, 2 bytes: cut
    assert bounded_text("a\ud800", 100) == "a\\ud800"  # a lone surrogate is escaped


def test_bounded_text_argument_rules() -> None:
    with pytest.raises(ArgumentTypeError):
        bounded_text(b"done", 10)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError):
        bounded_text("done", True)
    with pytest.raises(ArgumentTypeError):
        bounded_text("done", 10.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        bounded_text("", -1)


@SETTINGS
@given(st.text(), st.integers(min_value=0, max_value=40))
def test_bounded_text_is_the_storable_text_cut(text: str, max_bytes: int) -> None:
    """Its shortcut for ASCII that fits answers what the checks and the cut would."""
    assert bounded_text(text, max_bytes) == truncate_utf8(storable_text(text), max_bytes)[0]
