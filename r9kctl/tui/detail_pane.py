"""The detail pane: everything the registry knows about the selected variant (``r9kctl show``'s
``describe``), under the variant's value here, where that value comes from and what it overrode."""
from __future__ import annotations

from typing import Optional

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from r9k.registry.memory import fmt_bytes

from .session import Session
from .variant_table import LAYER_SHORT, show_value


def detail_renderable(s: Session, vid: str):
    from r9k.r9kctl.cmd_show import describe

    r = s.rs.items[vid]
    v = r.variant
    head = Text()
    head.append(v.knob, "bold")
    head.append(f"  {vid}\n", "dim")
    head.append("value here  ")
    head.append(show_value(r.value, 40), "bold green" if r.active else "bold")
    head.append(f"  ({'on' if r.active else 'stock/off'}, tp{s.tp})\n")
    head.append("from        ")
    head.append(f"{LAYER_SHORT.get(r.layer, r.layer)}: {r.source}\n", "magenta" if r.layer == "profile" else "")
    for layer, source, value in reversed(r.history):
        head.append("  overrode  ", "dim")
        head.append(f"{show_value(value, 24)} ({LAYER_SHORT.get(layer, layer)}: {source})\n", "dim")
    cost = s.cost(vid)
    if cost is not None and cost.bytes:
        head.append("KV cost     ")
        head.append(f"{fmt_bytes(cost.bytes)} a GPU = {cost.tokens:,} KV tokens"
                    f"{' (on)' if r.active else ' if switched on'}\n")
    env = s.env_overrides(vid)
    if env:
        head.append(f"the environment sets {env}: it wins over the profile\n", "bold yellow")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold cyan", no_wrap=True)
    grid.add_column(overflow="fold")
    for field, text in describe(s.reg, v):
        if field in ("id", "knob"):
            continue
        grid.add_row(field, text)
    return Group(head, grid)


class DetailPane(VerticalScroll):
    """Shows one variant; ``show(session, vid)`` redraws it."""

    can_focus = True

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._body = Static(id="detail-body")
        self.variant: Optional[str] = None
        self._key: Optional[tuple] = None

    def compose(self):
        yield self._body

    def show(self, s: Session, vid: Optional[str]) -> None:
        """Redraw for ``vid``, unless what the pane shows of it is unchanged (a toggle elsewhere)."""
        self.variant = vid
        if vid is None:
            self._key = None
            self._body.update(Text("no variant matches the filters", "dim"))
            return
        r = s.rs.items[vid]
        key = (id(s.reg), s.profile, s.tp, vid, r.value, r.layer, r.source, tuple(r.history))
        if key == self._key:
            return
        self._key = key
        self._body.update(detail_renderable(s, vid))
