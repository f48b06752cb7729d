"""Where a resolved value came from: typed provenance, carried from the resolver to every place that shows
it (``r9kctl resolve``, the control panel, the manifest, the plugin's status), and rendered here only.

Standard library only: the plugin's launch snapshot rebuilds it without loading the engine.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Optional

#: Layers whose values are written in a file the user edits: their place is shown first.
FILE_LAYERS = ("registry", "profile")


@dataclass(frozen=True)
class Origin:
    layer: str  # registry | release | profile | environment | override
    file: Optional[str] = None  # the TOML file that states the value, when one does
    line: Optional[int] = None  # 1-based, when known
    detail: str = ""  # what else to say: "release v0.3.2", "environment R9K_ROUTER", "--set R9K_ROUTER", "unsaved"
    key: Optional[str] = None  # the variable or --set key that set it (environment and override layers)

    @property
    def where(self) -> str:
        """``file:line``, ``file`` or ''."""
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.file or ""

    def __str__(self) -> str:
        """The one rendering: ``registry/variants/decode.toml:40``, ``profiles/x.toml:12 (unsaved)``,
        ``release v0.3.1 (registry/releases/v0.3.1.toml)``, ``environment R9K_ROUTER``, ``--set R9K_ROUTER``."""
        where, detail = self.where, self.detail
        if where and detail:
            return f"{where} ({detail})" if self.layer in FILE_LAYERS else f"{detail} ({where})"
        return where or detail or self.layer

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Origin":
        line = d.get("line")
        return cls(str(d.get("layer", "override")), d.get("file"), int(line) if line else None,
                   str(d.get("detail", "")), d.get("key"))


class WithOrigin:
    """``layer`` and ``source`` of anything with an ``origin`` (the engine's Resolved, the snapshot's item)."""

    origin: Origin

    @property
    def layer(self) -> str:
        return self.origin.layer

    @property
    def source(self) -> str:
        """The origin as a person reads it: ``registry/variants/decode.toml:40``, ``environment R9K_X``, ..."""
        return str(self.origin)
