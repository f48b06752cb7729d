"""The variants of the shown profile: value, stock value, provenance, status, gate state, KV cost. A line-API
widget (``ScrollView.render_line``), not ``DataTable``: each row's strip is cached and a toggle re-renders only
the rows whose cells changed (notes/tui.md, "Speed")."""
from __future__ import annotations

from typing import Iterable, Optional

from rich.segment import Segment
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from .session import UNSAVED, Session

COLUMNS = (  # key, label, width, in the order shown; row_cells gives the cells in this order
    ("mark", "", 1),
    ("knob", "knob", 26),  # the table's key: as wide as the longest knob (fill), never cut
    ("value", "value", 12),
    ("from", "from", 8),
    ("gate", "gate", 7),
    ("cost", "KV tok", 8),
    ("stock", "stock", 8),
    ("status", "status", 10),
    ("variant", "variant id", 28),
)
PAD = 1  # cells of padding either side of a column
# Narrower than every column: the variant id shrinks (down to VARIANT_MIN), then columns hide in this order.
HIDE_ORDER = ("variant", "status", "stock", "gate", "cost", "from")
VARIANT_MIN = 14


def layout(width: int, knob_width: int) -> list[tuple[int, int]]:
    """(column index, width) of the columns shown in a table ``width`` cells wide."""
    widths = {k: w for k, _l, w in COLUMNS} | {"knob": knob_width}
    shown = [k for k, _l, _w in COLUMNS]

    def total() -> int:
        return sum(widths[k] + 2 * PAD for k in shown)

    if total() > width:
        widths["variant"] = max(VARIANT_MIN, widths["variant"] - (total() - width))
    for key in HIDE_ORDER:
        if total() <= width:
            break
        shown.remove(key)
    index = {k: i for i, (k, _l, _w) in enumerate(COLUMNS)}
    return [(index[k], widths[k]) for k in shown]


LAYER_SHORT = {"environment": "env"}  # the other layers by their own names
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


def row_state(s: Session, vid: str, problems: dict[str, str]) -> tuple:
    """Everything a row's cells depend on that a toggle can change (cheap to compute and compare)."""
    r = s.rs.items[vid]
    return (r.value, r.layer, r.source, r.active, problems.get(vid), vid in s.edits.get(s.profile, {}))


def row_cells(s: Session, vid: str, problems: dict[str, str]) -> tuple:
    r = s.rs.items[vid]
    v = r.variant
    edited = vid in s.edits.get(s.profile, {})
    level = problems.get(vid)
    mark = Text("✗", "bold red") if level == "error" else Text("!", "bold yellow") if level == "warning" else \
        Text("*", "bold magenta") if edited else Text(" ")
    val = show_value(r.value, 10)
    value = Text(("● " if r.active else "  ") + val, "bold green" if r.active else "")
    if edited:
        value.stylize("underline", 2)
    layer = LAYER_SHORT.get(r.layer, r.layer)
    src = Text(layer + ("*" if r.origin.detail == UNSAVED else ""),
               "magenta" if r.layer == "profile" else "yellow" if r.layer in ("environment", "override") else "dim")
    gate = s.gate_state(vid)
    cost = s.cost(vid)
    if cost is None or cost.tokens == 0:
        ctext = Text("")
    elif r.active:
        ctext = Text(tokens_text(-cost.tokens), "red" if cost.tokens > 0 else "green")
    else:
        ctext = Text(f"({tokens_text(-cost.tokens)})", "dim")
    return (mark, Text(v.knob, "bold" if edited else ""), value, src,
            Text(gate, GATE_STYLE.get(gate.rstrip("*"), "dim")), ctext, Text(show_value(v.stock, 8)),
            Text(v.status.state, STATUS_STYLE[v.status.state]), Text(vid))


def _line(cells: tuple, cols: list[tuple[int, int]]) -> Text:
    line = Text(no_wrap=True, end="")
    for i, width in cols:
        t = cells[i].copy()
        t.truncate(width, overflow="ellipsis", pad=True)
        line.append(" " * PAD)
        line.append_text(t)
        line.append(" " * PAD)
    return line


class VariantTable(ScrollView, can_focus=True):
    """One row per variant, a fixed header line; ``cursor_row`` indexes the shown variants."""

    BINDINGS = [
        Binding("space,enter", "screen.toggle", "Toggle/edit", id="r9k.toggle"),
        Binding("equals_sign", "screen.edit", "Type a value", id="r9k.edit"),
        Binding("backspace,delete", "screen.reset", "Reset to inherited", show=False, id="r9k.reset"),
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "to(0)", "First", show=False),
        Binding("end", "to(-1)", "Last", show=False),
    ]
    COMPONENT_CLASSES = {"variant-table--header", "variant-table--cursor", "variant-table--even"}
    DEFAULT_CSS = """
    VariantTable { background: $surface; color: $foreground; }
    VariantTable > .variant-table--header { text-style: bold; background: $panel; color: $foreground; }
    VariantTable > .variant-table--even { background: $surface-lighten-1 50%; }
    VariantTable > .variant-table--cursor { background: $block-cursor-blurred-background;
                                            color: $block-cursor-blurred-foreground; }
    VariantTable:focus > .variant-table--cursor { background: $block-cursor-background;
                                                  color: $block-cursor-foreground; text-style: bold; }
    """

    cursor_row: reactive[int] = reactive(0, always_update=False, init=False)

    class Highlighted(Message):
        def __init__(self, table: "VariantTable", vid: Optional[str]) -> None:
            super().__init__()
            self.table = table
            self.vid = vid

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._shown: list[str] = []
        self._cells: dict[str, tuple] = {}
        self._state: dict[str, tuple] = {}
        self._strips: dict[tuple, Strip] = {}  # (vid, selected, even, focused, scroll_x, width) -> rendered row
        self._knob_width = COLUMNS[1][2]
        self._cols: list[tuple[int, int]] = []  # the shown columns at the current width (layout())
        self._cols_for: Optional[tuple] = None

    @property
    def shown(self) -> list[str]:
        return list(self._shown)

    def current_variant(self) -> Optional[str]:
        if 0 <= self.cursor_row < len(self._shown):
            return self._shown[self.cursor_row]
        return None

    def fill(self, s: Session, vids: Iterable[str]) -> None:
        """Replace the rows (a filter changed, or another profile / TP size)."""
        keep = self.current_variant()
        problems = s.problems_by_item()
        self._shown = list(vids)
        self._cells = {vid: row_cells(s, vid, problems) for vid in self._shown}
        self._state = {vid: row_state(s, vid, problems) for vid in self._shown}
        self._strips.clear()
        self._knob_width = max([len(COLUMNS[1][1])] + [len(s.reg.variants[v].knob) for v in s.reg.variants])
        self._cols_for = None
        self._relayout()
        row = self._shown.index(keep) if keep in self._shown else 0
        self.set_reactive(VariantTable.cursor_row, row)
        self.scroll_to_cursor()
        self.refresh()
        self.post_message(self.Highlighted(self, self.current_variant()))

    def update_rows(self, s: Session) -> int:
        """After an edit: re-render only the rows whose state changed. Returns how many."""
        problems = s.problems_by_item()
        changed = 0
        for i, vid in enumerate(self._shown):
            st = row_state(s, vid, problems)
            if st == self._state.get(vid):
                continue
            self._state[vid] = st
            self._cells[vid] = row_cells(s, vid, problems)
            for key in [k for k in self._strips if k[0] == vid]:
                del self._strips[key]
            self.refresh_line(i + 1)
            changed += 1
        return changed

    def watch_cursor_row(self, old: int, new: int) -> None:
        self.refresh_line(old + 1)
        self.refresh_line(new + 1)
        self.scroll_to_cursor()
        self.post_message(self.Highlighted(self, self.current_variant()))

    def validate_cursor_row(self, row: int) -> int:
        return max(0, min(row, len(self._shown) - 1)) if self._shown else 0

    def scroll_to_cursor(self) -> None:
        body = max(1, self.scrollable_content_region.height - 1)  # rows below the header, above a scrollbar
        y = self.scroll_offset.y
        if self.cursor_row < y:
            self.scroll_to(y=self.cursor_row, animate=False, immediate=True, force=True)
        elif self.cursor_row >= y + body:
            self.scroll_to(y=self.cursor_row - body + 1, animate=False, immediate=True, force=True)

    def cursor_visible(self) -> bool:
        """Whether the cursor's row is in view (not scrolled away with the wheel or the scrollbar)."""
        body = max(1, self.scrollable_content_region.height - 1)
        y = self.scroll_offset.y
        return y <= self.cursor_row < y + body

    def jump_to(self, vid: str) -> bool:
        if vid not in self._shown:
            return False
        self.cursor_row = self._shown.index(vid)
        return True

    def action_cursor(self, step: int) -> None:
        self.cursor_row = self.cursor_row + step

    def action_page(self, direction: int) -> None:
        self.cursor_row = self.cursor_row + direction * max(1, self.scrollable_content_region.height - 2)

    def action_to(self, row: int) -> None:
        self.cursor_row = row if row >= 0 else len(self._shown) - 1

    def on_click(self, event: events.Click) -> None:
        row = event.y + self.scroll_offset.y - 1  # the header is line 0
        if event.y >= 1 and 0 <= row < len(self._shown):
            self.cursor_row = row
            if event.chain == 2:  # a double click toggles (or opens the input), like space
                self.screen.run_action("toggle")

    def _relayout(self) -> None:
        """The shown columns for the current width (the knob column whole at any width it fits in)."""
        width = self.scrollable_content_region.width or self.size.width or 200
        if self._cols_for == (width, self._knob_width):
            return
        self._cols_for = (width, self._knob_width)
        self._cols = layout(width, self._knob_width)
        self._strips.clear()
        self.virtual_size = Size(sum(w + 2 * PAD for _i, w in self._cols), len(self._shown) + 1)

    def on_resize(self, event) -> None:
        self._relayout()
        self.refresh()

    def on_focus(self) -> None:
        self._strips.clear()
        self.refresh()

    on_blur = on_focus

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    def _strip(self, line: Text, style, scroll_x: int, width: int) -> Strip:
        """A row's text rendered with ``style``, the ``width`` cells from ``scroll_x``: the text is cut before it is
        rendered (cheaper) where every character is one cell wide, else the rendered strip is cropped."""
        cut = line.cell_len == len(line.plain)
        if cut:
            line = line[scroll_x:scroll_x + width]
            line.pad_right(width - len(line.plain))
        strip = Strip([Segment(t, style + s if s else style) for t, s, _c in line.render(self.app.console)])
        return strip if cut else strip.crop_extend(scroll_x, scroll_x + width, style)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        base = self.rich_style
        if self._cols_for is None:
            self._relayout()
        if y == 0:
            key = ("", scroll_x, width)  # the header's ("" is no variant's id)
            if key not in self._strips:
                line = _line(tuple(Text(label) for _k, label, _w in COLUMNS), self._cols)
                style = base + self.get_component_rich_style("variant-table--header")
                self._strips[key] = self._strip(line, style, scroll_x, width)
            return self._strips[key]
        row = scroll_y + y - 1
        if row >= len(self._shown):
            return Strip.blank(width, base)
        vid = self._shown[row]
        selected = row == self.cursor_row
        even = row % 2 == 1
        key = (vid, selected, even, self.has_focus, scroll_x, width)
        strip = self._strips.get(key)
        if strip is None:
            style = base
            if even:
                style = style + self.get_component_rich_style("variant-table--even")
            if selected:
                style = style + self.get_component_rich_style("variant-table--cursor")
            strip = self._strip(_line(self._cells[vid], self._cols), style, scroll_x, width)
            if len(self._strips) > 8 * len(self._shown) + 64:  # scrolled sideways a lot: start afresh
                self._strips.clear()
            self._strips[key] = strip
        return strip
