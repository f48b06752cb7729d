"""The variants of the shown profile: value, stock value, provenance, status, gate state, KV cost.

Redrawing after a toggle touches only the cells whose text changed (the previous cells are kept per
row), so a toggle costs a few cell updates, not a rebuilt table.
"""
from __future__ import annotations

from typing import Iterable, Optional

from rich.text import Text
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from .session import UNSAVED, Session

COLUMNS = (  # key, label, width (None: fit the content)
    ("mark", " ", 1),
    ("variant", "variant", 28),
    ("value", "value", 12),
    ("stock", "stock", 8),
    ("from", "from", 8),
    ("status", "status", 10),
    ("gate", "gate", 7),
    ("cost", "KV tok", 8),
    ("knob", "knob", None),
)

LAYER_SHORT = {"registry": "registry", "release": "release", "profile": "profile", "environment": "env",
               "override": "override"}
GATE_STYLE = {"fresh": "green", "stale": "yellow", "missing": "dim", "failed": "bold red"}
STATUS_STYLE = {"default-on": "", "opt-in": "cyan", "rejected": "red", "removed": "dim red"}


def show_value(value: Optional[str], limit: int = 18) -> str:
    if value is None:
        return "(unset)"
    if value == "":
        return "''"
    return value if len(value) <= limit else value[: limit - 1] + "…"


def tokens_text(n: int) -> str:
    a = abs(n)
    if a >= 10_000:
        return f"{n / 1000:+.0f}k"
    if a >= 1000:
        return f"{n / 1000:+.1f}k"
    return f"{n:+d}"


def _sig(cell) -> object:
    """What a cell looks like (rich's Text equality ignores the base style)."""
    if isinstance(cell, Text):
        return (cell.plain, str(cell.style), tuple(cell.spans))
    return cell


def row_cells(s: Session, vid: str, problems: dict[str, str]) -> tuple:
    """The cells of one variant's row (plain values and rich Text: compared to find changed cells)."""
    r = s.rs.items[vid]
    v = r.variant
    edited = vid in s.edits.get(s.profile, {})
    level = problems.get(vid)
    mark = Text("✗", "bold red") if level == "error" else Text("!", "bold yellow") if level == "warning" else \
        Text("*", "bold magenta") if edited else Text(" ")
    val = show_value(r.value, 10)
    value = Text(("● " if r.active else "  ") + val, "bold green" if r.active else "")
    if edited:
        value.stylize("underline")
    layer = LAYER_SHORT.get(r.layer, r.layer)
    src = Text(layer + ("*" if UNSAVED in r.source else ""),
               "magenta" if r.layer == "profile" else "yellow" if r.layer in ("environment", "override") else "dim")
    gate = s.gate_state(vid)
    cost = s.cost(vid)
    if cost is None or cost.tokens == 0:
        ctext = Text("")
    elif r.active:
        ctext = Text(tokens_text(-cost.tokens), "red" if cost.tokens > 0 else "green")
    else:
        ctext = Text(f"({tokens_text(-cost.tokens)})", "dim")
    return (mark, vid, value, show_value(v.stock, 8), src, Text(v.status.state, STATUS_STYLE[v.status.state]),
            Text(gate, GATE_STYLE.get(gate, "dim")), ctext, v.knob)


class VariantTable(DataTable):
    """One row per variant (key: the variant id)."""

    BINDINGS = [
        Binding("space,enter", "screen.toggle", "Toggle/edit", id="r9k.toggle"),
        Binding("e", "screen.edit", "Edit value", id="r9k.edit"),
        Binding("backspace,delete", "screen.reset", "Reset to inherited", show=False, id="r9k.reset"),
    ]

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)
        self._cells: dict[str, tuple] = {}
        self._shown: list[str] = []

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)

    @property
    def shown(self) -> list[str]:
        return list(self._shown)

    def current_variant(self) -> Optional[str]:
        if not self._shown or self.cursor_row < 0 or self.cursor_row >= len(self._shown):
            return None
        return self._shown[self.cursor_row]

    def fill(self, s: Session, vids: Iterable[str]) -> None:
        """Replace the rows (a filter changed, or another profile / TP size)."""
        keep = self.current_variant()
        problems = s.problems_by_item()
        vids = list(vids)
        self.clear()
        self._cells = {vid: row_cells(s, vid, problems) for vid in vids}
        self._shown = vids
        self.add_rows_keyed(vids)
        if keep in vids:
            self.move_cursor(row=vids.index(keep), animate=False)

    def add_rows_keyed(self, vids: list[str]) -> None:
        for vid in vids:
            self.add_row(*self._cells[vid], key=vid)

    def update_rows(self, s: Session) -> int:
        """Recompute every shown row; update only the cells that changed. Returns that count."""
        problems = s.problems_by_item()
        changed = 0
        keys = [c[0] for c in COLUMNS]
        for vid in self._shown:
            new = row_cells(s, vid, problems)
            old = self._cells.get(vid) or (None,) * len(new)
            for i, (a, b) in enumerate(zip(old, new)):
                if _sig(a) != _sig(b):
                    self.update_cell(vid, keys[i], b, update_width=False)
                    changed += 1
            self._cells[vid] = new
        return changed

    def jump_to(self, vid: str) -> bool:
        if vid not in self._shown:
            return False
        self.move_cursor(row=self._shown.index(vid), animate=False)
        return True

    def cursor_coordinate_for(self, vid: str) -> Optional[Coordinate]:
        return Coordinate(self._shown.index(vid), 0) if vid in self._shown else None
