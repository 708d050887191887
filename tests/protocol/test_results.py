"""The structured result contract: parsing, field paths in errors, bounds."""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retinue.errors import ArgumentTypeError, ResultContractError, RetinueError
from retinue.protocol.results import (
    RESULT_VERSION,
    Artifact,
    Change,
    Claim,
    StructuredResult,
    Verification,
    parse_result,
    result_instruction,
)

SETTINGS = settings(max_examples=100, derandomize=True, deadline=None)


LIST_FIELDS = (
    "claims",
    "artifacts",
    "changes",
    "verification",
    "limitations",
    "unresolved_dependencies",
)


def minimal(**extra: Any) -> dict[str, Any]:
    """The minimum valid result (every list present and empty), with ``extra`` on top."""
    base: dict[str, Any] = {"version": RESULT_VERSION, "status": "completed", "summary": "done"}
    base.update({key: [] for key in LIST_FIELDS})
    return {**base, **extra}


def without(key: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k != key}


def full() -> dict[str, Any]:
    return minimal(
        claims=[
            {"claim": "tests pass", "classification": "observed", "evidence": ["ran pytest"]},
            {"claim": "the API is stable", "classification": "inferred", "evidence": []},
        ],
        artifacts=[
            {"id": "report.md", "kind": "file"},
            {
                "id": "sha256:abc-1_2",
                "kind": "blob",
                "version": "3",
                "location": "s3://b/k",
                "digest": "sha256:00",
            },
        ],
        changes=[{"path": "src/app.py", "summary": "fixed the bug"}],
        verification=[
            {
                "status": "passed",
                "summary": "all green",
                "command": "pytest -q",
                "evidence": ["120 passed"],
            },
            {"status": "not-run", "summary": "no Windows runner"},
        ],
        limitations=["did not test on Windows"],
        unresolved_dependencies=["needs the staging key"],
        reason_code="ok",
        provenance={"agent": "/root/review", "model": "scripted"},
    )


def parse(obj: dict[str, Any]) -> StructuredResult:
    return parse_result(json.dumps(obj))


def error_for(obj: dict[str, Any]) -> ResultContractError:
    with pytest.raises(ResultContractError) as info:
        parse(obj)
    return info.value


def assert_field(obj: dict[str, Any], field: str) -> ResultContractError:
    exc = error_for(obj)
    assert exc.field == field
    assert f" at {field}:" in str(exc)
    return exc


# -- accepted shapes ---------------------------------------------------------------


def test_version_constant() -> None:
    assert RESULT_VERSION == "retinue.result.v2"


def test_minimal_result() -> None:
    result = parse(minimal())
    assert result == StructuredResult(
        version="retinue.result.v2",  # RESULT_VERSION (test_version_constant), as its Literal
        status="completed",
        summary="done",
        claims=(),
        artifacts=(),
        changes=(),
        verification=(),
        limitations=(),
        unresolved_dependencies=(),
    )
    assert result.reason_code is None
    assert result.provenance is None


@pytest.mark.parametrize("key", LIST_FIELDS)
def test_every_list_field_is_required(key: str) -> None:
    exc = assert_field(without(key, minimal()), key)
    assert "missing" in str(exc)


def test_full_result() -> None:
    result = parse(full())
    assert result.claims[0] == Claim(
        claim="tests pass", classification="observed", evidence=("ran pytest",)
    )
    assert result.claims[1].evidence == ()
    assert result.artifacts[0] == Artifact(id="report.md", kind="file")
    assert result.artifacts[1].digest == "sha256:00"
    assert result.changes == (Change(path="src/app.py", summary="fixed the bug"),)
    assert result.verification == (
        Verification(
            status="passed", summary="all green", command="pytest -q", evidence=("120 passed",)
        ),
        Verification(status="not-run", summary="no Windows runner"),
    )
    assert result.reason_code == "ok"
    assert result.provenance == {"agent": "/root/review", "model": "scripted"}
    assert result.limitations == ("did not test on Windows",)
    assert result.unresolved_dependencies == ("needs the staging key",)


def test_result_is_frozen() -> None:
    result = parse(minimal())
    with pytest.raises(AttributeError):
        result.summary = "changed"  # type: ignore[misc]


@pytest.mark.parametrize("status", ["completed", "partial", "blocked", "needs-input", "failed"])
def test_every_status(status: str) -> None:
    assert parse(minimal(status=status)).status == status


@pytest.mark.parametrize("classification", ["observed", "inferred", "unverified"])
def test_every_classification(classification: str) -> None:
    claim = {"claim": "c", "classification": classification, "evidence": []}
    assert parse(minimal(claims=[claim])).claims[0].classification == classification


@pytest.mark.parametrize("status", ["passed", "failed", "not-run"])
def test_every_verification_status(status: str) -> None:
    result = parse(minimal(verification=[{"status": status, "summary": "s"}]))
    assert result.verification[0].status == status


def test_verification_is_a_list_not_an_object() -> None:
    exc = assert_field(minimal(verification={"status": "passed", "summary": "s"}), "verification")
    assert "array" in str(exc)


def test_claim_evidence_is_required() -> None:
    exc = assert_field(
        minimal(claims=[{"claim": "c", "classification": "observed"}]), "claims[0].evidence"
    )
    assert "missing" in str(exc)


def test_optional_reason_code_and_provenance() -> None:
    result = parse(minimal(status="blocked", reason_code="missing-credentials"))
    assert result.reason_code == "missing-credentials"
    assert_field(minimal(reason_code=7), "reason_code")
    assert_field(minimal(provenance={"agent": 1}), "provenance[...]")  # msgspec's name
    assert_field(minimal(provenance=["a"]), "provenance")
    too_many = {f"k{i}": "v" for i in range(51)}
    assert_field(minimal(provenance=too_many), "provenance")


def test_surrounding_whitespace_is_allowed() -> None:
    assert parse_result("\n  " + json.dumps(minimal()) + "\n\n").summary == "done"


def test_fenced_json_block_with_prose_around_it() -> None:
    text = "Here is my result:\n\n```json\n" + json.dumps(minimal(), indent=2) + "\n```\nThanks."
    assert parse_result(text).summary == "done"


def test_fenced_block_tag_is_case_insensitive() -> None:
    assert parse_result("```JSON\n" + json.dumps(minimal()) + "\n```").status == "completed"


def test_single_untagged_fence_is_accepted() -> None:
    assert parse_result("```\n" + json.dumps(minimal()) + "\n```").summary == "done"


def test_json_block_wins_over_other_fences() -> None:
    text = "```sh\nmake test\n```\n```json\n" + json.dumps(minimal()) + "\n```\n"
    assert parse_result(text).summary == "done"


def test_two_json_blocks_are_refused() -> None:
    block = "```json\n" + json.dumps(minimal()) + "\n```\n"
    with pytest.raises(ResultContractError, match="2 ```json blocks") as info:
        parse_result(block + block)
    assert info.value.field == ""


@pytest.mark.parametrize("text", ["", "I am done.", "```python\nprint(1)\n```"])
def test_no_object_is_refused(text: str) -> None:
    with pytest.raises(ResultContractError, match="no JSON object found") as info:
        parse_result(text)
    assert info.value.field == ""


@pytest.mark.parametrize(
    "text", ["{", '{"version": }', json.dumps(minimal()) + " trailing", "```json\n{\n```"]
)
def test_malformed_json_is_refused(text: str) -> None:
    with pytest.raises(ResultContractError, match="not valid JSON") as info:
        parse_result(text)
    assert info.value.field == ""


def test_top_level_must_be_an_object() -> None:
    with pytest.raises(ResultContractError, match="object"):
        parse_result("```json\n[1, 2]\n```")


def test_non_str_is_a_type_error() -> None:
    with pytest.raises(ArgumentTypeError):
        parse_result(b"{}")  # type: ignore[arg-type]


def test_errors_are_value_errors() -> None:
    with pytest.raises(ValueError):
        parse_result("nope")
    assert issubclass(ResultContractError, RetinueError)


# -- field paths -------------------------------------------------------------------


def test_bad_classification_names_claims_2_classification() -> None:
    good = {"claim": "c", "classification": "observed", "evidence": []}
    bad = {"claim": "c", "classification": "guessed", "evidence": []}
    exc = assert_field(minimal(claims=[good, good, bad]), "claims[2].classification")
    assert "claims[2].classification" in str(exc)
    assert "guessed" in str(exc)


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (minimal(version="retinue.result.v1"), "version"),
        (minimal(status="done"), "status"),
        (minimal(summary=3), "summary"),
        (minimal(claims={}), "claims"),
        (minimal(claims=[{"claim": "c", "classification": "observed", "evidence": [1]}]),
         "claims[0].evidence[0]"),
        (minimal(artifacts=[{"id": "a", "kind": 5}]), "artifacts[0].kind"),
        (minimal(verification=[{"status": "green", "summary": "s"}]), "verification[0].status"),
        (minimal(limitations=["ok", None]), "limitations[1]"),
        (minimal(unresolved_dependencies="x"), "unresolved_dependencies"),
    ],
)  # fmt: skip
def test_wrong_values_name_their_field(obj: dict[str, Any], field: str) -> None:
    assert_field(obj, field)


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"status": "completed", "summary": "s"}, "version"),
        ({"version": RESULT_VERSION, "summary": "s"}, "status"),
        ({"version": RESULT_VERSION, "status": "completed"}, "summary"),
        (minimal(claims=[{"claim": "c", "evidence": []}]), "claims[0].classification"),
        (minimal(artifacts=[{"kind": "file"}]), "artifacts[0].id"),
        (minimal(changes=[{"path": "p"}]), "changes[0].summary"),
        (minimal(verification=[{"status": "passed"}]), "verification[0].summary"),
    ],
)
def test_missing_fields_are_named(obj: dict[str, Any], field: str) -> None:
    exc = assert_field(obj, field)
    assert "missing" in str(exc)


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (minimal(extra=1), "extra"),
        (minimal(claims=[{"claim": "c", "classification": "observed", "evidence": [],
                          "why": "x"}]),
         "claims[0].why"),
        (minimal(artifacts=[{"id": "a", "kind": "k", "size": 3}]), "artifacts[0].size"),
        (minimal(changes=[{"path": "p", "summary": "s", "diff": ""}]), "changes[0].diff"),
        (minimal(verification=[{"status": "passed", "summary": "s", "exit": 0}]),
         "verification[0].exit"),
    ],
)  # fmt: skip
def test_unknown_keys_are_rejected_and_named(obj: dict[str, Any], field: str) -> None:
    exc = assert_field(obj, field)
    assert "unknown" in str(exc)


@SETTINGS
@given(st.from_regex(r"[a-z_]{1,12}", fullmatch=True))
def test_any_unknown_top_level_key_is_rejected(key: str) -> None:
    if key in StructuredResult.__struct_fields__:
        return
    exc = error_for(minimal(**{key: "x"}))
    assert exc.field == key


# -- bounds ------------------------------------------------------------------------


def test_string_of_8_kib_ascii_is_accepted() -> None:
    assert len(parse(minimal(summary="a" * 8192)).summary) == 8192


def test_string_of_8_kib_plus_one_is_rejected() -> None:
    assert_field(minimal(summary="a" * 8193), "summary")


def test_string_bound_is_in_utf8_bytes() -> None:
    assert parse(minimal(summary="é" * 4096)).summary == "é" * 4096  # 8192 bytes
    exc = assert_field(minimal(summary="é" * 4097), "summary")  # 4097 chars, 8194 bytes
    assert "8194 bytes" in str(exc)


def test_string_bound_applies_to_nested_strings() -> None:
    claim = {"claim": "c", "classification": "observed", "evidence": ["ok", "€" * 3000]}
    assert_field(minimal(claims=[claim]), "claims[0].evidence[1]")
    artifact = {"id": "a", "kind": "k", "location": "€" * 2731}
    assert_field(minimal(artifacts=[artifact]), "artifacts[0].location")
    assert_field(
        minimal(verification=[{"status": "passed", "summary": "s", "command": "x" * 9000}]),
        "verification[0].command",
    )


LISTS: list[tuple[str, Any, str]] = [
    ("claims", {"claim": "c", "classification": "observed", "evidence": []}, "claims"),
    ("verification", {"status": "passed", "summary": "s"}, "verification"),
    ("artifacts", None, "artifacts"),
    ("changes", {"path": "p", "summary": "s"}, "changes"),
    ("limitations", "x", "limitations"),
    ("unresolved_dependencies", "x", "unresolved_dependencies"),
]


@pytest.mark.parametrize(("key", "item", "field"), LISTS)
def test_lists_hold_at_most_50_items(key: str, item: Any, field: str) -> None:
    def items(n: int) -> list[Any]:
        if key == "artifacts":
            return [{"id": f"a{i}", "kind": "k"} for i in range(n)]
        return [item] * n

    assert len(getattr(parse(minimal(**{key: items(50)})), key)) == 50
    assert_field(minimal(**{key: items(51)}), field)


def test_nested_lists_hold_at_most_50_items() -> None:
    claim = {"claim": "c", "classification": "observed", "evidence": ["e"] * 50}
    assert len(parse(minimal(claims=[claim])).claims[0].evidence) == 50
    claim["evidence"] = ["e"] * 51
    assert_field(minimal(claims=[claim]), "claims[0].evidence")
    verification = {"status": "passed", "summary": "s", "evidence": ["e"] * 51}
    assert_field(minimal(verification=[verification]), "verification[0].evidence")


def test_whole_input_is_bounded_at_51200_bytes() -> None:
    base = json.dumps(minimal())
    pad = 51_200 - len(base.encode())
    assert parse_result(base + " " * pad).summary == "done"  # exactly at the bound
    with pytest.raises(ResultContractError, match="51200-byte limit") as info:
        parse_result(base + " " * (pad + 1))
    assert info.value.field == ""


def test_input_bound_counts_utf8_bytes_and_prose() -> None:
    prose = "é" * 26_000  # 26,000 characters, 52,000 bytes
    text = prose + "\n```json\n" + json.dumps(minimal(), indent=2) + "\n```\n"
    assert len(text) < 51_200 < len(text.encode())
    with pytest.raises(ResultContractError, match="51200-byte limit"):
        parse_result(text)


def test_strings_within_their_bound_still_trip_the_whole_bound() -> None:
    claims = [{"claim": "c" * 8000, "classification": "observed", "evidence": []} for _ in range(7)]
    with pytest.raises(ResultContractError, match="51200-byte limit"):
        parse(minimal(claims=claims))


@pytest.mark.parametrize("artifact_id", ["a", "Z", "0", "a.b", "A1._:-x", "sha256:ff", "x" * 256])
def test_valid_artifact_ids(artifact_id: str) -> None:
    result = parse(minimal(artifacts=[{"id": artifact_id, "kind": "k"}]))
    assert result.artifacts[0].id == artifact_id


@pytest.mark.parametrize(
    "artifact_id", ["", "-a", ".a", ":a", "_a", "a b", "a/b", "a\n", "é", "a" + "x" * 256]
)
def test_invalid_artifact_ids(artifact_id: str) -> None:
    ok = {"id": "first", "kind": "k"}
    assert_field(minimal(artifacts=[ok, {"id": artifact_id, "kind": "k"}]), "artifacts[1].id")


def test_artifact_ids_must_be_unique() -> None:
    artifacts = [{"id": "a", "kind": "k"}, {"id": "b", "kind": "k"}, {"id": "a", "kind": "j"}]
    exc = assert_field(minimal(artifacts=artifacts), "artifacts[2].id")
    assert "duplicate" in str(exc)
    assert "artifacts[0].id" in str(exc)


def test_artifact_ids_are_case_sensitive() -> None:
    artifacts = [{"id": "a", "kind": "k"}, {"id": "A", "kind": "k"}]
    assert len(parse(minimal(artifacts=artifacts)).artifacts) == 2


# -- the instruction ---------------------------------------------------------------


def test_instruction_example_parses() -> None:
    text = result_instruction()
    blocks = re.findall(r"```json\n(.*?)\n```", text, flags=re.DOTALL)
    assert len(blocks) == 1
    example = parse_result(blocks[0])
    assert example.version == RESULT_VERSION
    assert parse_result(text) == example


def test_instruction_example_has_every_top_level_field() -> None:
    text = result_instruction()
    block = re.findall(r"```json\n(.*?)\n```", text, flags=re.DOTALL)[0]
    example = json.loads(block)
    required = [
        name
        for name in StructuredResult.__struct_fields__
        if name not in ("reason_code", "provenance")
    ]
    assert list(example) == required
    for key in LIST_FIELDS:
        assert example[key] == []


def test_instruction_mentions_every_field_and_value() -> None:
    text = result_instruction()
    for word in [
        RESULT_VERSION,
        *StructuredResult.__struct_fields__,
        "needs-input",
        "unverified",
        "not-run",
        "digest",
        "8192",
        "50",
        "51200",
    ]:
        assert word in text


def test_parsed_result_round_trips_through_json() -> None:
    result = parse(full())
    assert parse_result(msgspec.json.encode(result).decode()) == result
