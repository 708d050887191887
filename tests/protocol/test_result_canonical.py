"""The structured result's canonical output, its bound, and blank artifact fields."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from retinue.errors import ResultContractError
from retinue.protocol.results import (
    MAX_INPUT_BYTES,
    RESULT_VERSION,
    encode_result,
    parse_result,
)

LISTS = ("claims", "artifacts", "changes", "verification", "limitations", "unresolved_dependencies")


def minimal(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"version": RESULT_VERSION, "status": "completed", "summary": "done"}
    base.update({key: [] for key in LISTS})
    return {**base, **extra}


def compact(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def near_the_bound() -> str:
    """A valid result whose compact JSON is a few bytes under MAX_INPUT_BYTES.

    Its 49 artifacts leave ``version``, ``location`` and ``digest`` out, and
    its verifications ``command`` and ``evidence``: re-encoding them as nulls
    would add hundreds of bytes.
    """
    artifacts = [{"id": f"a{i}", "kind": "file"} for i in range(49)]
    verification = [{"status": "passed", "summary": "ok"} for _ in range(49)]
    obj = minimal(artifacts=artifacts, verification=verification)
    room = MAX_INPUT_BYTES - len(compact(obj).encode()) - 10
    obj["limitations"] = ["x" * 8000 for _ in range(room // 8003)]
    obj["summary"] = "s" * (MAX_INPUT_BYTES - len(compact(obj).encode()) - 10)
    text = compact(obj)
    assert MAX_INPUT_BYTES - 20 < len(text.encode()) <= MAX_INPUT_BYTES
    return text


def test_canonical_output_omits_absent_optional_fields() -> None:
    text = compact(
        minimal(
            artifacts=[{"id": "r", "kind": "file"}],
            verification=[{"status": "not-run", "summary": "later"}],
        )
    )
    out = encode_result(parse_result(text))
    assert json.loads(out) == json.loads(text)
    assert "null" not in out and "reason_code" not in out and "digest" not in out


def test_canonical_output_keeps_present_fields_and_round_trips() -> None:
    obj = minimal(
        artifacts=[{"id": "r", "kind": "file", "version": "1", "location": "x/y", "digest": "d"}],
        reason_code="ok",
        provenance={"agent": "/root/a"},
    )
    out = encode_result(parse_result(compact(obj)))
    assert json.loads(out) == obj
    assert encode_result(parse_result(out)) == out  # canonical: a fixed point


def test_a_valid_result_near_the_bound_fits_and_is_valid_json() -> None:
    text = near_the_bound()
    out = encode_result(parse_result(text))
    assert len(out.encode()) <= MAX_INPUT_BYTES
    assert json.loads(out) == json.loads(text)


def test_a_result_over_the_output_bound_is_a_contract_error() -> None:
    result = parse_result(near_the_bound())
    with pytest.raises(ResultContractError, match="output_max_bytes") as caught:
        encode_result(result, max_bytes=10_000)
    assert caught.value.field == ""
    assert "bytes" in str(caught.value)


def test_a_lone_surrogate_in_the_answer_is_kept_escaped() -> None:
    # Providers do send half an emoji; it must not raise a raw UnicodeEncodeError.
    text = compact(minimal(summary="SURR")).replace("SURR", "half \ud83d an emoji")
    result = parse_result(text)
    assert result.summary == "half \\ud83d an emoji"  # escaped as runner outputs are
    out = encode_result(result)
    assert json.loads(out.encode("utf-8")) == json.loads(text.replace("\ud83d", "\\\\ud83d"))


def test_a_lone_surrogate_in_a_built_result_is_written_as_an_escape() -> None:
    built = msgspec.structs.replace(parse_result(compact(minimal())), summary="a\udc00b")
    out = encode_result(built)
    out.encode("utf-8")  # storable as it is
    assert json.loads(out)["summary"] == "a\udc00b"


@pytest.mark.parametrize("field", ["kind", "version", "location", "digest"])
@pytest.mark.parametrize("blank", ["", " ", "\t\n ", "\u3000"])
def test_blank_artifact_fields_are_refused(field: str, blank: str) -> None:
    artifact = {"id": "r", "kind": "file", field: blank}
    with pytest.raises(ResultContractError, match="blank") as caught:
        parse_result(compact(minimal(artifacts=[{"id": "ok", "kind": "k"}, artifact])))
    assert caught.value.field == f"artifacts[1].{field}"


def test_absent_optional_artifact_fields_are_still_fine() -> None:
    result = parse_result(compact(minimal(artifacts=[{"id": "r", "kind": "file"}])))
    assert result.artifacts[0].version is None
