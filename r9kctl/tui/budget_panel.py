"""The memory budget: KV-cache capacity, its change since the last save, where each GPU's memory goes
(a stacked bar reads faster than four numbers) and how the capacity moved over this session's edits."""
from __future__ import annotations

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import Static

from ...registry.memory import fmt_bytes

from .session import Session

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
    def compose(self):
        self.text_widget = Static(id="budget-text")
        yield self.text_widget

    _key: tuple = ()

    _session = None

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
        # vLLM's CPU backend: the KV cache is its own allocation (VLLM_CPU_KVCACHE_SPACE), not in the GPU share
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
        if b.kv_pool_separate:
            t.append(f"KV: its own pool; the rest of {fmt_bytes(cap)} usable ({b.utilization:g} x "
                     f"{fmt_bytes(b.memory_bytes)})", "dim")
        else:
            t.append(f"of {fmt_bytes(cap)} usable ({b.utilization:g} x {fmt_bytes(b.memory_bytes)})", "dim")
        if len(s.kv_history) > 1:
            t.append("\nKV over the edits ", "dim")
            t.append(spark(s.kv_history[-(width - 18):]), "green")
        txt.update(t, layout=False)  # a fixed-height box: no reflow of the screen
