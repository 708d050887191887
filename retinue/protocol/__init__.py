"""Pure data and rules: agent paths, limits, the delegation graph, results, text.

No threads and no I/O; these modules import nothing of retinue but
``retinue.errors`` and each other.
"""

from __future__ import annotations

from retinue.protocol.checks import (
    PREVIEW_CHARS,
    check_key,
    check_seconds,
    check_text,
    preview,
)
from retinue.protocol.graph import (
    validate_graph,
)
from retinue.protocol.limits import (
    ENV_PREFIX,
    MAX_DEPTH,
    MAX_INT,
    Limits,
)
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
from retinue.protocol.results import (
    ARTIFACT_ID_PATTERN,
    MAX_ARTIFACT_ID_LENGTH,
    MAX_INPUT_BYTES,
    MAX_LIST_ITEMS,
    MAX_STRING_BYTES,
    RESULT_VERSION,
    Artifact,
    Change,
    Claim,
    ResultStatus,
    StructuredResult,
    Verification,
    encode_result,
    parse_result,
    result_instruction,
)
from retinue.protocol.text import (
    HEAD_TRUNCATION_MARKER,
    TAIL_TRUNCATION_MARKER,
    bounded_text,
    safe_terminal_text,
    storable_text,
    truncate_utf8,
    truncate_utf8_tail,
)

__all__ = [  # noqa: RUF022 (plain sorted(), checked by a test)
    "ARTIFACT_ID_PATTERN",
    "Artifact",
    "Change",
    "Claim",
    "ENV_PREFIX",
    "HEAD_TRUNCATION_MARKER",
    "Limits",
    "MAX_ARTIFACT_ID_LENGTH",
    "MAX_DEPTH",
    "MAX_INPUT_BYTES",
    "MAX_INT",
    "MAX_LIST_ITEMS",
    "MAX_NAME_LENGTH",
    "MAX_PATH_LENGTH",
    "MAX_STRING_BYTES",
    "PREVIEW_CHARS",
    "RESULT_VERSION",
    "ROOT",
    "ResultStatus",
    "StructuredResult",
    "TAIL_TRUNCATION_MARKER",
    "Verification",
    "bounded_text",
    "check_key",
    "check_seconds",
    "check_text",
    "child_path",
    "depth",
    "derive_name",
    "encode_result",
    "is_immediate_child",
    "is_sound",
    "join",
    "name_of",
    "names_sound",
    "parent_of",
    "parse_result",
    "preview",
    "resolve",
    "result_instruction",
    "safe_terminal_text",
    "storable_text",
    "truncate_utf8",
    "truncate_utf8_tail",
    "validate",
    "validate_graph",
    "validate_name",
]
