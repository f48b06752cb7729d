"""The diff view: the edits against the saved profile, or any two releases or profiles, by the diff of
``r9kctl diff`` (``r9k.registry.diff.diff``), laid out like its table output."""
from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from .panels import Picker
from .session import Session
from ..cmd_diff import (cell, eval_label, fmt_delta, method_label, quality_rows, quality_text, row_label,
                        side_names, value_text, vs_reference_rows)


def _table(title: str, columns, rows, overflow: str = "fold") -> Table:
    t = Table(title=title, title_justify="left", header_style="bold", expand=True)
    for c in columns:
        t.add_column(c, overflow=overflow)
    for r in rows:
        t.add_row(*r)
    return t


def diff_renderable(reg, d, A: str, B: str):
    """The diff as rich renderables; the numbers are the releases' (a profile's: its base release's)."""
    parts = []
    if d.added or d.removed or d.left_off:
        changes = (("added", d.added), ("removed", d.removed), ("measured, left off", d.left_off))
        parts.append(_table("Variants", ("change", "variant", "knob"),
                            [(change, v, reg.variants[v].knob) for change, vids in changes for v in vids], "ellipsis"))
    if d.fields:
        parts.append(_table("Profile fields", ("field", A, B),
                            [(Text(f), Text(value_text(a)), Text(value_text(b))) for f, a, b in d.fields]))
    if d.changed:
        show_src = d.a.kind == "profile" or d.b.kind == "profile"
        parts.append(_table(f"Changed values ({len(d.changed)})",
                            ["knob", "tp", A, B] + (["source in " + B] if show_src else []),
                            [[Text(c.knob), Text(c.tp), Text(value_text(c.a), "red"), Text(value_text(c.b), "green")]
                             + ([Text(value_text(c.b_source), "dim")] if show_src else []) for c in d.changed]))
    else:
        parts.append(Text("No value differs.", "bold"))
    for key in sorted(set(d.a.kv_tokens) | set(d.b.kv_tokens)):
        ka, kb = d.a.kv_tokens.get(key), d.b.kv_tokens.get(key)
        if ka is not None and kb is not None:
            parts.append(Text.assemble(("KV cache at ", "bold"), (key, "bold"), f": {ka:,} -> {kb:,} tokens ",
                                       (f"({kb - ka:+,})", "bold green" if kb > ka else "bold red" if kb < ka else "")))
    RA, RB = side_names(d, A, B)
    rows = [r for r in d.bench if r.stack == "ours" and (r.delta != 0 or r.note)]
    if rows:
        parts.append(_table(f"Numbers of release {RA} and release {RB}",
                            ("config", "metric", "source", f"release {RA}", f"release {RB}", "change"),
                            [map(Text, (r.config + (f" {r.setting}" if r.setting else ""), row_label(r),
                                        method_label(r.method), cell(r.a, r.a_alt), cell(r.b, r.b_alt), fmt_delta(r)))
                             for r in rows]))
    for rel in dict.fromkeys((RA, RB)):
        items = [v for v in d.vs_reference if v.release == rel]
        if items:
            parts.append(_table(f"Release {rel} vs the reference stack",
                                ("config", "metric", "source", f"release {rel}", "reference", "ours vs reference"),
                                [map(Text, [cfg, *r]) for cfg in dict.fromkeys(v.config for v in items)
                                 for r in vs_reference_rows([v for v in items if v.config == cfg])]))
    parts += [Text(f"{cfg} ({rel}): {text}", "dim") for rel, cfg, text in d.texts]
    for q in d.quality:
        parts.append(_table(f"Quality gate ({q.config})", ("", eval_label(q), "HumanEval", "strict sanity"),
                            [map(Text, r) for r in quality_rows(q)]))
        parts.append(Text(f"Paired: {quality_text(q)}", "dim"))
    return Group(*parts)


class DiffScreen(Screen):
    """Side A and side B pickers (releases, profiles, and the edited profile) over the diff."""

    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="r9k.back"),
        Binding("x", "swap", "Swap sides", id="r9k.diff_swap"),
    ]

    def __init__(self, session: Session, a: str | None = None, b: str | None = None, **kw) -> None:
        super().__init__(**kw)
        self.s = session
        self.edited = f"{session.profile}*"
        self.a = a or session.profile
        self.b = b or self.edited

    def compose(self):
        reg = self.s.reg
        opts = [(f"{self.s.profile} (with the unsaved edits)", self.edited)]
        opts += [(f"profile {p}", p) for p in sorted(reg.profiles)]
        opts += [(f"release {r}", r) for r in reversed(reg.release_order())]
        with Horizontal(id="diff-sides"):
            yield Picker("A", opts, self.a, id="diff-a")
            yield Static(Text(" -> ", "bold"), classes="side-label")
            yield Picker("B", opts, self.b, id="diff-b")
        with VerticalScroll(id="diff-body"):
            yield Static(id="diff-content")
        yield Footer()

    def on_mount(self) -> None:
        self.render_diff()

    def on_picker_changed(self, event: Picker.Changed) -> None:
        event.stop()
        if event.picker.id == "diff-a":
            self.a = str(event.value)
        else:
            self.b = str(event.value)
        self.render_diff()

    def action_swap(self) -> None:
        self.a, self.b = self.b, self.a
        self.query_one("#diff-a", Picker).value = self.a
        self.query_one("#diff-b", Picker).value = self.b
        self.render_diff()

    def render_diff(self) -> None:
        body = self.query_one("#diff-content", Static)
        if self.a == self.b:
            body.update(Text("A and B are the same side.", "dim"))
            return
        d = self.s.diff_sides(self.a, self.b)
        body.update(diff_renderable(self.s.reg, d, self.a, self.b))
