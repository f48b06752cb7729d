"""What the plugin needs of a resolved set, as a structural type.

Two types provide it: the engine's :class:`r9k.registry.resolve.ResolvedSet` (a process that resolved
the profile itself) and the launch snapshot's :class:`r9k.plugin.snapshot.LightSet` (a later process of
the same launch, rebuilt without loading the registry). The plugin (dispatch table, availability rule,
status, env declaration) reads a set only through these names; ``tests/core/test_resolved_view.py``
checks that both types have them.
"""
from __future__ import annotations

from typing import Mapping, Optional, Protocol, runtime_checkable

from ..registry.origin import Origin


@runtime_checkable
class ImplementationView(Protocol):
    module: Optional[str]
    op: Optional[str]
    platforms: list[str]
    extension_point: Optional[str]


@runtime_checkable
class VariantView(Protocol):
    id: str
    knob: str
    stock: Optional[str]
    category: str
    graph_affecting: bool
    implementation: ImplementationView


@runtime_checkable
class ItemView(Protocol):
    variant: VariantView
    value: Optional[str]
    origin: Origin

    @property
    def layer(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def is_stock(self) -> bool: ...

    @property
    def active(self) -> bool: ...


@runtime_checkable
class ResolvedView(Protocol):
    profile: str
    tp: int
    model: Optional[str]
    platform: Optional[str]
    strict: bool
    extra_env: dict[str, str]
    items: Mapping[str, ItemView]

    @property
    def hash(self) -> str: ...

    def non_stock(self) -> list: ...
