"""The registry: every kernel variant and fusion, the release files and the models, in TOML under
this folder, loaded through the strict schema of :mod:`r9k.registry.schema`.

    from r9k.registry import load_registry
    reg = load_registry()                       # packaged tree, or the one the environment names
    from r9k.registry.resolve import resolve
    rs = resolve(reg, "tp4-default")            # the active set, with provenance
    from r9k.registry.validate import validate
    report = validate(reg, profile="tp4-default")

Importing this package is cheap (the standard library only): the loader (pydantic) is imported on the
first use of ``Registry`` or ``load_registry``, so the vLLM plugin can read :mod:`.envvars` on every
process start without paying for it.
"""
from .errors import Diagnostic, RegistryError

__all__ = ["Diagnostic", "Registry", "RegistryError", "load_registry"]


def __getattr__(name: str):
    if name in ("Registry", "load_registry"):
        from . import loader

        return getattr(loader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
