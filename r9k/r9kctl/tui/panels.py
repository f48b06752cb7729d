"""The panel's widgets besides the variant table: the picker, the search and filter bar, the detail pane, the
validation panel and the memory budget. The panels have a fixed size and redraw without a reflow of the screen."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from rich.table import Table
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from ...registry.loader import Registry
from ...registry.memory import fmt_bytes
from ..cmd_show import describe
from .session import Session, match_rank
from .variant_table import LAYER_SHORT, show_value


# ------------------------------------------------------------------------------ picker

Options = Sequence[tuple[str, Any]]  # (label, value)


class PickerScreen(ModalScreen[Optional[int]]):
    """Dismisses with the index of the chosen option, or None."""

    BINDINGS = [Binding("escape", "dismiss", "Cancel", id="r9k.cancel"),
                Binding("down", "move(1)", show=False), Binding("up", "move(-1)", show=False)]

    def __init__(self, title: str, options: Options, current: int, **kw) -> None:
        super().__init__(**kw)
        self.title_text = title
        self.options = list(options)
        self.current = current

    def compose(self):
        with Vertical(id="picker-dialog"):
            yield Static(Text(self.title_text, "bold"))
            yield Input(placeholder="type to filter", id="picker-filter")
            yield OptionList(id="picker-list")

    def on_mount(self) -> None:
        self._fill("")
        self.query_one(Input).focus()

    def _fill(self, query: str) -> None:
        words = query.lower().split()
        lst = self.query_one(OptionList)
        lst.clear_options()
        matches = [(match_rank(label, words), i, label) for i, (label, _v) in enumerate(self.options)
                   if all(w in label.lower() for w in words)]
        shown = [Option(label, id=str(i)) for _r, i, label in sorted(matches)]  # the best match first
        lst.add_options(shown)
        if shown:
            ids = [o.id for o in shown]
            lst.highlighted = ids.index(str(self.current)) if not words and str(self.current) in ids else 0

    def on_input_changed(self, event: Input.Changed) -> None:
        self._fill(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        lst = self.query_one(OptionList)
        if lst.highlighted is not None and lst.option_count:
            self.dismiss(int(lst.get_option_at_index(lst.highlighted).id))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(int(event.option_id))

    def action_move(self, step: int) -> None:
        lst = self.query_one(OptionList)
        if lst.option_count:
            lst.highlighted = ((lst.highlighted or 0) + step) % lst.option_count


class Picker(Widget, can_focus=True):
    """``Picker(label, options, value)``: shows the choice; enter, space or a click opens a list with a filter box;
    posts :class:`Picker.Changed` when the user picks. One widget, not ``Select``'s four: a faster first frame."""

    DEFAULT_CSS = """
    Picker { height: 1; width: auto; padding: 0 1; background: $boost; }
    Picker:focus { background: $block-cursor-background; color: $block-cursor-foreground; }
    """
    BINDINGS = [Binding("enter,space", "open", "Choose", show=False)]
    value: reactive[Any] = reactive(None, layout=True, init=False)  # set by the program: no Changed

    class Changed(Message):
        def __init__(self, picker: "Picker", value: Any) -> None:
            super().__init__()
            self.picker = picker
            self.value = value

        @property
        def control(self) -> "Picker":
            return self.picker

    def __init__(self, label: str, options: Options, value: Any = None, **kw) -> None:
        super().__init__(**kw)
        self.label = label
        self._options = list(options)
        self.set_reactive(Picker.value, value)

    def set_options(self, options: Options, value: Any = None) -> None:
        self._options = list(options)
        self.value = value
        self.refresh(layout=True)  # the same value may have another label now

    def _shown(self) -> str:
        return next((label for label, v in self._options if v == self.value),
                    "all" if self.value is None else str(self.value))

    def render(self) -> Text:
        return Text.assemble((f"{self.label} ", "dim"), self._shown(), " ▾")

    def get_content_width(self, container, viewport) -> int:
        return len(self.label) + 1 + len(self._shown()) + 2

    def on_click(self, event: events.Click) -> None:
        self.action_open()

    def action_open(self) -> None:
        values = [v for _l, v in self._options]
        cur = values.index(self.value) if self.value in values else 0

        def done(idx: Optional[int]) -> None:
            if idx is None:
                return
            self.value = self._options[idx][1]
            self.post_message(self.Changed(self, self.value))

        self.app.push_screen(PickerScreen(f"Choose {self.label}", self._options, cur), done)


# ------------------------------------------------------------------------------ search and filters

# besides the registry's statuses: what the variant does in this profile
STATE_FILTERS = [("on here", "@on"), ("changed (unsaved)", "@edited"), ("with problems", "@problems"),
                 ("set by the profile", "@profile")]


@dataclass
class Filters:
    text: str = ""
    area: Optional[str] = None
    category: Optional[str] = None
    status: Optional[str] = None

    def matches(self, s: Session, vid: str, problems: dict) -> bool:
        v = s.reg.variants[vid]
        if self.area and v.area != self.area:
            return False
        if self.category and v.category != self.category:
            return False
        st = self.status
        if st:
            r = s.rs.items[vid]
            ok = {"@on": lambda: r.active, "@edited": lambda: vid in s.edits.get(s.profile, {}),
                  "@problems": lambda: vid in problems, "@profile": lambda: r.layer == "profile"}
            if not ok.get(st, lambda: v.status.state == st)():
                return False
        q = self.text.strip().lower()
        if q:
            hay = f"{vid} {v.knob} {' '.join(v.also_knobs)} {v.summary}".lower()
            return all(word in hay for word in q.split())
        return True

    def describe(self) -> str:
        """The active search and filters in words ("the search 'hc', the filter status=opt-in")."""
        parts = [f"the search '{self.text.strip()}'"] if self.text.strip() else []
        parts += [f"the filter {name}={val}" for name, val in
                  (("area", self.area), ("category", self.category), ("status", self.status)) if val]
        return ", ".join(parts) or "the filters"

    def apply(self, s: Session) -> list[str]:
        problems = s.problems_by_item() if self.status == "@problems" else {}
        return [vid for vid in s.reg.variants if self.matches(s, vid, problems)]


class FilterBar(Horizontal):
    """Incremental search (id, knob, summary) and filters by area, category and status."""

    def __init__(self, reg: Registry, **kw) -> None:
        super().__init__(**kw)
        self.reg = reg

    def compose(self):
        areas = sorted({v.area for v in self.reg.variants.values()})
        cats = sorted({v.category for v in self.reg.variants.values()})
        stats = sorted({v.status.state for v in self.reg.variants.values()})
        yield Input(placeholder="/ search id, knob, summary", id="search", compact=True)
        yield Picker("area", [("all", None)] + [(a, a) for a in areas], None, id="f-area")
        yield Picker("category", [("all", None)] + [(c, c) for c in cats], None, id="f-category")
        yield Picker("status", [("all", None)] + [(x, x) for x in stats] + STATE_FILTERS, None, id="f-status")

    def clear(self) -> None:
        self.query_one("#search", Input).value = ""
        for picker in self.query(Picker):
            picker.value = None

    def filters(self) -> Filters:
        vals = [self.query_one(f"#f-{name}", Picker).value for name in ("area", "category", "status")]
        return Filters(self.query_one("#search", Input).value, *(None if v is None else str(v) for v in vals))


# ------------------------------------------------------------------------------ detail pane

def detail_head(s: Session, vid: str) -> Text:
    """What changes with a toggle: the value here, its provenance, what it overrode, its cost."""
    r = s.rs.items[vid]
    v = r.variant
    head = Text.assemble((v.knob, "bold"), (f"  {vid}\n", "dim"), "value here  ",
                         (show_value(r.value, 40), "bold green" if r.active else "bold"),
                         f"  ({'on' if r.active else 'stock/off'}, tp{s.tp})\nfrom        ",
                         (f"{LAYER_SHORT.get(r.layer, r.layer)}: {r.source}\n",
                          "magenta" if r.layer == "profile" else ""))
    if r.history:  # the value this one replaced (the last one only)
        origin, value = r.history[-1]
        layer, source = origin.layer, str(origin)
        more = f" +{len(r.history) - 1} below" if len(r.history) > 1 else ""
        head.append("  overrode  ", "dim")
        head.append(f"{show_value(value, 24)} ({LAYER_SHORT.get(layer, layer)}: {source}){more}\n", "dim")
    cost = s.cost(vid)
    if cost is not None and cost.bytes:
        head.append(f"KV cost     {fmt_bytes(cost.bytes)} a GPU = {cost.tokens:,} KV tokens"
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
        if field not in ("id", "knob"):
            grid.add_row(field, text)
    return grid


class DetailPane(VerticalScroll):
    """Everything the registry knows about one variant (``r9kctl show``'s ``describe``) under its value here,
    provenance and what it overrode."""

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


# ------------------------------------------------------------------------------ validation panel

ICON = {"error": ("✗", "bold red"), "warning": ("!", "bold yellow"), "info": ("i", "cyan")}


def diagnostic_text(d, variants) -> Text:
    icon, style = ICON.get(d.level, ("?", ""))
    t = Text.assemble((f"{icon} ", style), (f"{d.code}: ", style), d.message)
    items = [i for i in d.items if i in variants]
    if items:
        t.append(f"  [{', '.join(items)}]", "cyan")
    loc = d.location()
    if loc:
        t.append(f"  {loc}", "dim")
    return t


class ValidationPanel(Vertical):
    """A count line, then the problems of the current state (errors first), as many as fit; ``v`` or a click
    opens them all (:class:`.dialogs.ProblemsScreen`)."""

    _key: tuple = ()

    def compose(self):
        self.title_widget = Static(id="validation-title")
        self.body_widget = Static(id="validation-body")
        yield self.title_widget
        yield self.body_widget

    def show(self, s: Session) -> None:
        if not s.validated:
            self._key = ()
            self.title_widget.update(Text("… validating (registry, gate ledger, profile)", "dim"), layout=False)
            self.body_widget.update("", layout=False)
            return
        diags = s.diagnostics()
        key = (s.profile, s.tp, tuple(d.format() + repr(d.items) for d in diags))
        if key == self._key:
            return
        self._key = key
        ne = sum(1 for d in diags if d.level == "error")
        nw = sum(1 for d in diags if d.level == "warning")
        if not diags:
            title = Text.assemble(("✓ valid", "bold green"), " (no errors, no warnings)")
        else:
            title = Text.assemble((f"✗ {ne} error(s)" if ne else "✓ no errors", "bold red" if ne else "bold green"),
                                  "  ", (f"{nw} warning(s)", "yellow" if nw else "dim"), ("   v: all problems", "dim"))
        self.title_widget.update(title, layout=False)
        body = Text("\n").join(diagnostic_text(d, s.reg.variants) for d in diags)
        self.body_widget.update(body, layout=False)  # fixed height (app.tcss): cropped, not reflowed
        self.set_class(bool(ne), "-errors")

    def on_click(self, event: events.Click) -> None:
        self.screen.run_action("problems")


# ------------------------------------------------------------------------------ memory budget

SEGMENTS = (("weights", "█", "blue"), ("overhead", "█", "grey50"), ("variants", "█", "magenta"),
            ("KV", "█", "green"), ("free", "░", "grey30"))


def bar(parts: list[tuple[str, int]], width: int) -> Text:
    total = sum(max(0, n) for _, n in parts) or 1
    out = Text()
    used = 0
    styles = {name: (ch, st) for name, ch, st in SEGMENTS}
    for i, (name, n) in enumerate(parts):
        cells = round(width * max(0, n) / total) if i < len(parts) - 1 else width - used
        cells = max(0, min(cells, width - used))
        ch, st = styles[name]
        out.append(ch * cells, st)
        used += cells
    return out


def legend(t: Text, *keys: tuple[str, str]) -> None:
    """A coloured square, then its words, for each (style, words)."""
    for style, words in keys:
        t.append("■ ", style)
        t.append(words)


BLOCKS = "▁▂▃▄▅▆▇█"


def spark(values: list[int]) -> str:
    """A one-line sparkline of the KV capacity over this session's edits."""
    lo, hi = min(values), max(values)
    if hi == lo:
        return BLOCKS[3] * len(values)
    return "".join(BLOCKS[round((v - lo) * (len(BLOCKS) - 1) / (hi - lo))] for v in values)


class BudgetPanel(Vertical):
    """KV-cache capacity, its change since the last save, where each GPU's memory goes (a stacked bar) and how
    the capacity moved over this session's edits."""

    _key: tuple = ()
    _session = None

    def compose(self):
        self.text_widget = Static(id="budget-text")
        yield self.text_widget

    def on_resize(self, event) -> None:
        if self._session is not None:
            self.show(self._session)  # the bar and the compact form follow the width

    def show(self, s: Session) -> None:
        self._session = s
        b = s.budget
        key = (s.profile, s.tp, self.size.width, None if b is None else (b.kv_tokens, b.variant_bytes, b.kv_bytes),
               s.kv_delta, tuple(s.kv_history[-60:]))
        if key == self._key:
            return
        self._key = key
        txt = self.text_widget
        if b is None:
            txt.update(Text(f"no memory budget: profile '{s.profile}' names no model/hardware with numbers at "
                            f"tp{s.tp}", "dim"))
            return
        t = Text()
        width = max(10, (self.size.width or 40) - 2)
        compact = width < 38  # a narrow terminal: one fact a line, nothing wraps
        t.append("KV " if compact else "KV cache ", "bold")
        t.append(f"{b.kv_tokens:,}", "bold green" if b.kv_tokens > 0 else "bold red")
        t.append(" tok")
        delta = s.kv_delta
        sep = "\n" if compact else "  "
        if delta:
            t.append(f"{sep}{delta:+,} vs saved", "bold green" if delta > 0 else "bold red")
        elif delta == 0:
            t.append(f"{sep}(as saved)", "dim")
        t.append("\n")
        cap = int(b.memory_bytes * b.utilization)
        kv_raw = b.kv_bytes if b.fixed_kv_bytes is None else b.fixed_kv_bytes
        kv = max(0, kv_raw)  # a budget that does not fit has no KV cache, not a negative one
        kv_text = fmt_bytes(kv) if kv_raw >= 0 else f"none ({fmt_bytes(-kv_raw)} short)"
        of_text = "its own pool" if b.kv_pool_separate else f"of {fmt_bytes(cap)}"
        t.append_text(bar([("weights", b.weights), ("overhead", b.overhead), ("variants", b.variant_bytes)]
                          + ([] if b.kv_pool_separate else [("KV", kv)]) + [("free", max(0, b.headroom))], width))
        t.append("\n")
        if compact:
            legend(t, ("magenta", f"variants {fmt_bytes(b.variant_bytes)}\n"), ("green", f"KV {kv_text}"))
            t.append(f" {of_text}", "dim")
            txt.update(t, layout=False)
            return
        legend(t, ("blue", f"weights {fmt_bytes(b.weights):<11}"), ("grey50", f"overhead {fmt_bytes(b.overhead)}\n"),
               ("magenta", f"variants {fmt_bytes(b.variant_bytes):<11} "), ("green", f"KV {kv_text}\n"))
        usable = f"{fmt_bytes(cap)} usable ({b.utilization:g} x {fmt_bytes(b.memory_bytes)})"
        t.append(("KV: its own pool; the rest of " if b.kv_pool_separate else "of ") + usable, "dim")
        if len(s.kv_history) > 1:
            t.append("\nKV over the edits ", "dim")
            t.append(spark(s.kv_history[-(width - 18):]), "green")
        txt.update(t, layout=False)  # a fixed-height box: no reflow of the screen
