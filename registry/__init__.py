"""The registry: every kernel variant and fusion, the release manifests and the models, in TOML under
this folder, loaded through the strict schema of :mod:`r9k.registry.schema`.

    from r9k.registry import load_registry
    reg = load_registry()                       # packaged tree, or $R9K_REGISTRY
    from r9k.registry.resolve import resolve
    rs = resolve(reg, "tp4-default")            # the active set, with provenance
    from r9k.registry.validate import validate
    report = validate(reg, profile="tp4-default")

This module imports only the loader (pydantic and the standard library), so the vLLM plugin can use it
on its startup path.
"""
from .errors import Diagnostic, RegistryError
from .loader import Registry, load_registry

__all__ = ["Diagnostic", "Registry", "RegistryError", "load_registry"]
