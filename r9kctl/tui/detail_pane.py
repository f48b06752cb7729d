"""The detail pane: everything the registry knows about the selected variant (``r9kctl show``'s
``describe``), under the variant's value here, where that value comes from and what it overrode."""
from __future__ import annotations

from typing import Optional

from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...registry.memory import fmt_bytes

from .session import Session
from .variant_table import LAYER_SHORT, show_value
from ..cmd_show import describe


HEAD_LINES = 6  # the state lines above the registry's description: a fixed height, redrawn without a reflow


def detail_head(s: Session, vid: str) -> Text:
    """What changes with a toggle: the value here, its provenance, what it overrode, its cost."""
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
    if r.history:  # the value this one replaced (only the last one; Resolved.history holds the whole chain)
        origin, value = r.history[-1]
        layer, source = origin.layer, str(origin)
        more = f" +{len(r.history) - 1} below" if len(r.history) > 1 else ""
        head.append("  overrode  ", "dim")
        head.append(f"{show_value(value, 24)} ({LAYER_SHORT.get(layer, layer)}: {source}){more}\n", "dim")
    cost = s.cost(vid)
    if cost is not None and cost.bytes:
        head.append("KV cost     ")
        head.append(f"{fmt_bytes(cost.bytes)} a GPU = {cost.tokens:,} KV tokens"
                    f"{' (on)' if r.active else ' if switched on'}\n")
    env = s.env_overrides(vid)
    if env:
        head.append(f"{env} sets it: that wins over the profile\n", "bold yellow")
    head.rstrip()
    return head


def detail_body(s: Session, vid: str) -> Table:
    """What the registry says of the variant (``r9kctl show``): changes only with the variant."""
    v = s.reg.variants[vid]
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold cyan", no_wrap=True)
    grid.add_column(overflow="fold")
    for field, text in describe(s.reg, v):
        if field in ("id", "knob"):
            continue
        grid.add_row(field, text)
    return grid


class DetailPane(VerticalScroll):
    """Shows one variant; ``show(session, vid)`` redraws it."""

    can_focus = True

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._head = Static(id="detail-head")
        self._body = Static(id="detail-body")
        self.variant: Optional[str] = None
        self._key: Optional[tuple] = None
        self._body_key: Optional[tuple] = None

    def compose(self):
        yield self._head
        yield self._body

    def show(self, s: Session, vid: Optional[str]) -> None:
        """Redraw for ``vid``, unless what the pane shows of it is unchanged (a toggle elsewhere)."""
        self.variant = vid
        if vid is None:
            self._key = self._body_key = None
            self._head.update(Text("no variant matches the filters", "dim"), layout=False)
            self._body.update("")
            return
        r = s.rs.items[vid]
        key = (id(s.reg), s.profile, s.tp, vid, r.value, r.layer, r.source, tuple(r.history))
        if key != self._key:
            self._key = key
            self._head.update(detail_head(s, vid), layout=False)  # fixed height (app.tcss)
        body_key = (id(s.reg), vid)
        if body_key != self._body_key:
            self._body_key = body_key
            self._body.update(detail_body(s, vid))
            self.scroll_home(animate=False)
