"""Incremental search (id, knob, summary) and filters by area, category and status."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from textual.containers import Horizontal
from textual.widgets import Input

from ...registry.loader import Registry

from .picker import Picker
from .session import Session

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
            if st == "@on" and not r.active:
                return False
            if st == "@edited" and vid not in s.edits.get(s.profile, {}):
                return False
            if st == "@problems" and vid not in problems:
                return False
            if st == "@profile" and r.layer != "profile":
                return False
            if not st.startswith("@") and v.status.state != st:
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

    def filters(self) -> Filters:
        def val(sel_id: str) -> Optional[str]:
            v = self.query_one(sel_id, Picker).value
            return None if v is None else str(v)

        return Filters(self.query_one("#search", Input).value, val("#f-area"), val("#f-category"), val("#f-status"))
