"""The registry: every kernel variant and fusion, the release files and the models, in TOML under this folder.

    from r9k.registry import load_registry
    reg = load_registry()

Importing this package is cheap (the standard library only): the loader (pydantic) is imported on the first
use of ``Registry`` or ``load_registry``, so the plugin can read :mod:`.envvars` at every process start.
"""
from .errors import Diagnostic, RegistryError

__all__ = ["Diagnostic", "Registry", "RegistryError", "load_registry"]


def __getattr__(name: str):
    if name in ("Registry", "load_registry"):
        from . import loader

        return getattr(loader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
