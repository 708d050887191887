"""Whether litellm's local cost map prices a model (a cost budget counts 0 for one it does not).

:func:`unpriced` asks litellm (imported here, with its local cost map) about
each model; the offline model ``retinue/scripted`` is never priced.
"""

from __future__ import annotations

from collections.abc import Iterable

from retinue.llm.model._provider import SCRIPTED_PROVIDER, load_litellm

__all__ = ["unpriced"]


def unpriced(models: Iterable[str]) -> list[str]:
    """Return the models of ``models`` litellm's cost map does not price, in order, once each."""
    litellm = load_litellm()
    out: list[str] = []
    for model in dict.fromkeys(models):
        if model.startswith(SCRIPTED_PROVIDER + "/"):
            out.append(model)
            continue
        try:
            info = litellm.get_model_info(model)
        except Exception:  # ModelNotMappedError and friends: not in the map
            out.append(model)
            continue
        if not (info.get("input_cost_per_token") or info.get("output_cost_per_token")):
            out.append(model)
    return out
