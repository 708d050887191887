"""Cassettes: record every model call (and host tool result) of a run, replay it offline.

:class:`Cassette` is the file as a runner uses it
(``LiteLLMRunner(cassette=path, mode="record"|"replay"|"auto")``); the
request a call is keyed by, and redaction, are in ``_requests``; the file's
format in ``_file``. The rest of
the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

from retinue.llm.cassette._cassette import MODES, Cassette
from retinue.llm.cassette._file import CASSETTE_VERSION, Header, ModelEntry, ToolEntry
from retinue.llm.cassette._requests import (
    REDACTED,
    Redactor,
    first_difference,
    model_call_index,
    request_key,
)

__all__ = [
    "CASSETTE_VERSION",
    "MODES",
    "REDACTED",
    "Cassette",
    "Header",
    "ModelEntry",
    "Redactor",
    "ToolEntry",
    "first_difference",
    "model_call_index",
    "request_key",
]
