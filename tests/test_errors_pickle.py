"""Every public error survives pickling with its fields (Ray tasks, process pools and
logging queues pickle exceptions; ``Exception`` pickles only ``args``)."""

from __future__ import annotations

import copy
import inspect
import pickle
from typing import Any

import pytest

import retinue.errors

_SAMPLES: dict[str, Any] = {
    "message": "what went wrong",
    "cycle": ["a", "b", "a"],
    "depth": 4,
    "cap": 3,
    "limit": 7,
    "value": 8,
    "used": 9,
    "owed": {0: 2, 3: 1},
    "path": "/root/a",
    "extra": ("mcp",),
    "stale": True,
    "pid": 1234,
    "shard": 2,
    "status": 429,
}
"""A value for each parameter name an error takes (a string for any other)."""


def _errors() -> list[type[BaseException]]:
    names = sorted(retinue.errors.__all__)
    found = [getattr(retinue.errors, name) for name in names]
    return [c for c in found if isinstance(c, type) and issubclass(c, BaseException)]


def _build(cls: type[BaseException]) -> BaseException:
    """An instance of ``cls`` with every parameter of its ``__init__`` given."""
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    for p in parameters:
        if p.kind is p.VAR_POSITIONAL:
            positional.append(_SAMPLES["message"])
            continue
        if p.kind is p.VAR_KEYWORD:
            continue
        sample = _SAMPLES.get(p.name, f"{p.name} given")
        if cls is retinue.errors.ExtraNotInstalled and p.name == "extra":
            sample = "mcp"
        if p.kind is p.KEYWORD_ONLY:
            keywords[p.name] = sample
        else:
            positional.append(sample)
    return cls(*positional, **keywords)


@pytest.mark.parametrize("cls", _errors(), ids=lambda c: c.__name__)
def test_a_public_error_keeps_its_words_and_fields_when_pickled_or_copied(
    cls: type[BaseException],
) -> None:
    error = _build(cls)
    for again in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert type(again) is cls
        assert str(again) == str(error)
        assert vars(again) == vars(error), cls.__name__
