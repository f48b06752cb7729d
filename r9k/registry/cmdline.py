"""Where a value given on the command line was typed: ``<command line>:1:COL``, like a file's line and column.

The command line is ``r9kctl`` and its words as ``shlex.join`` shows them; a ``--set KNOB=VALUE`` is located at
``KNOB=VALUE``, a ``--tp N`` at ``--tp`` (:func:`r9k.registry.consistency.value_where`). Standard library only.
"""
from __future__ import annotations

import shlex
from typing import Optional

#: The file name of the command line layer in a located diagnostic.
FILE = "<command line>"
NOWHERE = (None, None, None)


class CommandLine:
    """The words of one command line (after the program's name) and where each ``--set`` / option is."""

    def __init__(self, words: list[str], prog: str = "r9kctl"):
        self.words = list(words)
        shown = [shlex.quote(w) for w in [prog, *self.words]]
        self.text = " ".join(shown)
        self._cols: list[int] = []  # 1-based column of each word (after the program's name)
        col = len(shown[0]) + 2
        for s in shown[1:]:
            self._cols.append(col)
            col += len(s) + 1
        self._sets: dict[str, tuple[int, str]] = {}  # key -> (column of KNOB=VALUE, KNOB=VALUE); the last wins
        self._options: dict[str, tuple[int, str]] = {}  # option -> (column, "--tp 2"); the last wins
        self._items: dict[str, int] = {}  # each --set's text as typed -> its column
        i = 0
        while i < len(self.words):
            w = self.words[i]
            if w == "--":  # what follows goes to another program
                break
            opt, eq, val = w.partition("=")
            quoted = self._cols[i] + (1 if shown[i + 1] != w else 0)  # inside the quote shlex added
            if opt == "--set":
                if eq:
                    self._set(val, quoted + len("--set="))
                elif i + 1 < len(self.words):
                    i += 1
                    self._set(self.words[i], self._cols[i] + (1 if shown[i + 1] != self.words[i] else 0))
            elif opt.startswith("--") and opt != "--set":
                if eq:
                    self._options[opt] = (self._cols[i], f"{opt} {val}")
                elif i + 1 < len(self.words) and not self.words[i + 1].startswith("-"):
                    self._options[opt] = (self._cols[i], f"{opt} {self.words[i + 1]}")
            i += 1

    def _set(self, item: str, col: int) -> None:
        self._items[item] = col
        if "=" in item:
            self._sets[item.split("=", 1)[0].strip()] = (col, item)

    def set_where(self, key: Optional[str]) -> tuple:
        """(FILE, 1, column) of the ``--set`` that set ``key`` (as typed), else (None, None, None)."""
        hit = self._sets.get(key or "")
        return (FILE, 1, hit[0]) if hit else NOWHERE

    def set_text(self, key: Optional[str]) -> Optional[str]:
        """``--set KNOB=VALUE`` as typed, None when ``key`` was not set on this command line."""
        hit = self._sets.get(key or "")
        return f"--set {hit[1]}" if hit else None

    def item_where(self, item: str) -> tuple:
        """(FILE, 1, column) of a ``--set`` argument by its text (one without ``=`` too)."""
        return (FILE, 1, self._items[item]) if item in self._items else NOWHERE

    def option_where(self, option: str) -> tuple:
        """(FILE, 1, column) of an option with a value (``--tp``), else (None, None, None)."""
        hit = self._options.get(option)
        return (FILE, 1, hit[0]) if hit else NOWHERE

    def option_text(self, option: str) -> Optional[str]:
        hit = self._options.get(option)
        return hit[1] if hit else None


class Overrides(dict):
    """``--set`` overrides (key -> value, what :func:`r9k.registry.resolve.resolve` takes) that also know the
    command line they were typed on (None: given by a program, not typed)."""

    def __init__(self, *args, command_line: Optional[CommandLine] = None, **kw):
        super().__init__(*args, **kw)
        self.command_line = command_line


def last_value(argv: list[str], flag: str) -> Optional[str]:
    """The value of the last ``FLAG VALUE`` or ``FLAG=VALUE`` (the last one wins); None when absent."""
    value = None
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value
