"""The registry: every kernel variant and fusion, the release manifests and the models, in TOML under
this folder, loaded through the strict schema of :mod:`r9k.registry.schema`.

    from r9k.registry import load_registry
    reg = load_registry()                       # packaged tree, or $R9K_REGISTRY
    from r9k.registry.resolve import resolve
    rs = resolve(reg, "tp4-default")            # the active set, with provenance
    from r9k.registry.validate import validate
    report = validate(reg, profile="tp4-default")

Importing this package imports nothing else: the names below load on first use (PEP 562), so light
modules such as :mod:`r9k.registry.availability` (the plugin's startup path in every vLLM process)
do not pay for the schema (pydantic).
"""
from __future__ import annotations

__all__ = ["Diagnostic", "Registry", "RegistryError", "load_registry"]


def __getattr__(name: str):
    if name in ("Diagnostic", "RegistryError"):
        from . import errors

        return getattr(errors, name)
    if name in ("Registry", "load_registry"):
        from . import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'r9k.registry' has no attribute {name!r}")
