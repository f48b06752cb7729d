"""How well a name matches what was typed (the pickers' order, the closest profile to a mistyped name)."""
from __future__ import annotations

import re


def match_rank(label: str, words: list[str]) -> int:
    """0 exact, 1 the label starts with the query, 2 one of its words does (``-``, ``_``, ``.``, space
    separate words), 3 it contains it; no words: 0 (the given order)."""
    if not words:
        return 0
    q = " ".join(words)
    low = label.lower()
    if low == q:
        return 0
    if low.startswith(words[0]):
        return 1
    parts = re.split(r"[-_. ]+", low)
    if any(p.startswith(words[0]) for p in parts):
        return 2
    return 3
