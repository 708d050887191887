"""Access to litellm: imported once per process, never at ``import retinue``.

litellm costs seconds and ~190 MiB to import, and without
``LITELLM_LOCAL_MODEL_COST_MAP=True`` it fetches its cost map from the network
at import. :func:`load_litellm` sets that variable (unless the host set it),
imports litellm once per process, silences its feedback banners and registers
the ``retinue/`` custom provider: the offline ``retinue/scripted`` model, and
every model registered by name with :func:`~retinue.llm.model._offline.register_offline_model`
(``retinue/chaos`` while a ``retinue.testing.ChaosModel`` is installed).

:func:`preload_litellm` starts that import on a thread of its own (``Runtime.open``
does, as soon as a profile has a model, and ``retinue run``/``demo``/``resume``
at start), so a model turn rarely waits for it; :func:`load_litellm_async`
waits for it without blocking the event loop.

Two things the import does to the process's cyclic garbage collector: it
runs with the collector paused (litellm's import builds ~380,000 objects,
and the full collections the allocations set off cost a third of its time),
and once it is done, ``gc.freeze()`` moves every object alive then (litellm's,
and whatever the process had) out of the collector's scans, so a later full
collection no longer walks litellm's import-time objects: that walk stalled
every thread of the process for hundreds of milliseconds. The frozen objects
are still freed when their reference count drops to zero; only cyclic garbage
among them is never collected (``gc.unfreeze()`` undoes the freeze).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import os
import threading
from concurrent.futures import Future
from types import ModuleType

from retinue.llm.model._script import SCRIPTED_MODEL, SCRIPTED_PROVIDER

__all__ = [
    "SCRIPTED_MODEL",
    "SCRIPTED_PROVIDER",
    "load_litellm",
    "load_litellm_async",
    "loaded_litellm",
    "preload_litellm",
]


_lock = threading.Lock()
_module: ModuleType | None = None
_loading: Future[ModuleType] | None = None
_loading_lock = threading.Lock()


def load_litellm() -> ModuleType:
    """Import litellm (once), configured for retinue, and return the module.

    Sets ``LITELLM_LOCAL_MODEL_COST_MAP=True`` before the import if it is not
    set, turns off litellm's debug banners and registers the ``retinue``
    custom provider (the offline models: the scripted one and those registered
    in :mod:`retinue.llm.model._offline`) next to any the host registered.
    The import runs with the cyclic collector paused, then freezes what is
    alive (see the module's docstring). A call while another thread imports
    waits for that import.

    Raises:
        ImportError: litellm is not installed.
    """
    global _module
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            _module = _import()
    return _module


def _import() -> ModuleType:
    """Import and configure litellm, the collector paused; freeze what is alive after."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    paused = gc.isenabled()
    gc.disable()
    try:
        import litellm

        scripted = importlib.import_module("retinue.llm.model._scripted")
    finally:
        if paused:
            gc.enable()
    litellm.suppress_debug_info = True
    providers = list(getattr(litellm, "custom_provider_map", None) or [])
    if not any(p.get("provider") == SCRIPTED_PROVIDER for p in providers):
        providers.append({"provider": SCRIPTED_PROVIDER, "custom_handler": scripted.ScriptedLLM()})
        litellm.custom_provider_map = providers
    gc.freeze()
    module: ModuleType = litellm
    return module


def preload_litellm() -> Future[ModuleType]:
    """Start importing litellm on a daemon thread (once); return the import's future.

    Returns at once. The future holds the module, or the ``ImportError``
    (after which the next call tries again). With litellm already imported,
    the future is already done and no thread starts.
    """
    global _loading
    with _loading_lock:
        if _loading is not None:
            return _loading
        future: Future[ModuleType] = Future()
        _loading = future
        if _module is not None:
            future.set_result(_module)
            return future
    threading.Thread(
        target=_load_into, args=(future,), name="retinue-litellm-import", daemon=True
    ).start()
    return future


def _load_into(future: Future[ModuleType]) -> None:
    """Run :func:`load_litellm` and settle ``future`` with its module or its error."""
    global _loading
    try:
        module = load_litellm()
    except BaseException as exc:  # ImportError, or anything litellm's import raises
        with _loading_lock:
            _loading = None  # a later preload tries again
        future.set_exception(exc)
        return
    future.set_result(module)


def loaded_litellm() -> ModuleType | None:
    """Return litellm if it is imported already (through this module), else None."""
    return _module


async def load_litellm_async() -> ModuleType:
    """Return litellm, waiting for its import (started if need be) without blocking the loop.

    Raises:
        ImportError: litellm is not installed.
    """
    if _module is not None:
        return _module
    return await asyncio.wrap_future(preload_litellm())
