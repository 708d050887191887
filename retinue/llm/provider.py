"""Lazy access to litellm: imported the first time a model is called, never at ``import retinue``.

litellm costs seconds and ~190 MiB to import, and without
``LITELLM_LOCAL_MODEL_COST_MAP=True`` it fetches its cost map from the network
at import. :func:`load_litellm` sets that variable (unless the host set it),
imports litellm once per process, silences its feedback banners and registers
the ``retinue/`` custom provider: the offline ``retinue/scripted`` model, and
every model registered by name with :func:`~retinue.llm.offline.register_offline_model`
(``retinue/chaos`` while a ``retinue.testing.ChaosModel`` is installed).
"""

from __future__ import annotations

import importlib
import os
import threading
from types import ModuleType

from retinue.llm.script import SCRIPTED_MODEL, SCRIPTED_PROVIDER

__all__ = ["SCRIPTED_MODEL", "SCRIPTED_PROVIDER", "load_litellm"]


_lock = threading.Lock()
_module: ModuleType | None = None


def load_litellm() -> ModuleType:
    """Import litellm (once), configured for retinue, and return the module.

    Sets ``LITELLM_LOCAL_MODEL_COST_MAP=True`` before the import if it is not
    set, turns off litellm's debug banners and registers the ``retinue``
    custom provider (the offline models: the scripted one and those registered
    in :mod:`retinue.llm.offline`) next to any the host registered.

    Raises:
        ImportError: litellm is not installed.
    """
    global _module
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm

            scripted = importlib.import_module("retinue.llm.scripted")
            litellm.suppress_debug_info = True
            providers = list(getattr(litellm, "custom_provider_map", None) or [])
            if not any(p.get("provider") == SCRIPTED_PROVIDER for p in providers):
                providers.append(
                    {"provider": SCRIPTED_PROVIDER, "custom_handler": scripted.ScriptedLLM()}
                )
                litellm.custom_provider_map = providers
            _module = litellm
    return _module
