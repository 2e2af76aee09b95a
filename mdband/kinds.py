"""Model kinds: the table from a model file's ``kind`` to the function that builds its network.

A builder is ``builder(config: dict, state_dict: dict | None, options: dict) -> nn.Module``;
``options`` are run-time settings (e.g. ``rotation_layout``) that do not change the model's
numbers or its hash. :func:`model_builder` finds the builder of a kind, first match wins:

1. kinds registered with :func:`register_kind` by modules already imported;
2. mdband's own kinds, ``"sezm"`` (:func:`mdband.model.factory.build_sezm`), wired in here so
   they never depend on the installed package metadata (a source checkout run with
   ``PYTHONPATH`` finds them too);
3. entry points of installed distributions in the group ``mdband.model_kinds`` (entry-point
   name = kind, value = ``"module:builder"``), the way another package adds a kind::

       [project.entry-points."mdband.model_kinds"]
       mykind = "mypackage.model:build"

4. the modules named in the environment variable ``MDBAND_PLUGINS`` (comma-separated, e.g.
   ``MDBAND_PLUGINS=mdband.testing.lj,mdband.testing.mp``), imported when a kind is not found
   otherwise; each registers its kinds with :func:`register_kind` when imported. This is how
   the test potentials ``lj`` and ``mp2`` reach child processes (``mdband run``, LAMMPS): they
   are not product kinds, and mdband's load path never imports :mod:`mdband.testing`.

This module imports nothing of mdband at module level but :mod:`mdband.errors`, so a kind's
module can import :func:`register_kind` without an import circle.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from importlib.metadata import entry_points

from mdband.errors import PluginImportError, UnknownModelKindError

ENTRY_POINT_GROUP = "mdband.model_kinds"
PLUGINS_ENV = "MDBAND_PLUGINS"

Builder = Callable[[dict, "dict | None", dict], object]

_REGISTERED: dict[str, Builder] = {}
_PRODUCT_KINDS = ("sezm",)


def register_kind(kind: str):
    """Return a decorator that registers a builder for model files of kind ``kind``.

    Usage::

        @register_kind("lj")
        def build(config, state_dict, options): ...

    mdband's own kinds cannot be replaced (ValueError).
    """
    if kind in _PRODUCT_KINDS:
        raise ValueError(f"model kind {kind!r} is mdband's own and cannot be registered again")

    def deco(fn: Builder) -> Builder:
        _REGISTERED[kind] = fn
        return fn

    return deco


def _product_builder(kind: str) -> Builder | None:
    if kind == "sezm":
        from mdband.model.factory import build_sezm

        return build_sezm
    return None


def _entry_point_builder(kind: str) -> Builder | None:
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == kind:
            try:
                return ep.load()
            except Exception as exc:  # noqa: BLE001 - any import error of a third-party module
                raise PluginImportError(
                    f"entry point {ep.name} = {ep.value!r} (group {ENTRY_POINT_GROUP}) cannot be "
                    f"loaded: {type(exc).__name__}: {exc}"
                ) from exc
    return None


def plugin_modules() -> list[str]:
    """Return the module names in ``MDBAND_PLUGINS`` (empty when it is unset)."""
    return [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]


def import_plugins() -> None:
    """Import the modules named in ``MDBAND_PLUGINS`` (each registers its kinds)."""
    for name in plugin_modules():
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - report any failure of the named module
            raise PluginImportError(
                f"{PLUGINS_ENV} names module {name!r}, which cannot be imported: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


def known_kinds() -> list[str]:
    """Kinds found without importing anything: registered, mdband's own and entry points."""
    names = set(_REGISTERED) | set(_PRODUCT_KINDS)
    names |= {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return sorted(names)


def model_builder(kind: str) -> Builder:
    """Return the builder of ``kind`` (see the module docstring for where it is looked for).

    Raises
    ------
    UnknownModelKindError
        No registered module, mdband kind, entry point or ``MDBAND_PLUGINS`` module builds it.
    PluginImportError
        An entry point or a module of ``MDBAND_PLUGINS`` fails to import.
    """
    fn = _REGISTERED.get(kind) or _product_builder(kind) or _entry_point_builder(kind)
    if fn is None:
        import_plugins()
        fn = _REGISTERED.get(kind)
    if fn is None:
        raise UnknownModelKindError(kind, known_kinds())
    return fn
