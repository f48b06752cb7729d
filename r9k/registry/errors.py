"""Located diagnostics: every error or warning names its file, line and column and the affected items."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, Optional

Level = Literal["error", "warning", "info"]


@dataclass
class Diagnostic:
    level: Level
    code: str  # short stable id: toml-syntax, schema, unknown-variant, bad-value, extends-cycle, ...
    message: str
    file: Optional[str] = None
    line: Optional[int] = None
    col: Optional[int] = None
    items: list[str] = field(default_factory=list)  # variant ids, knobs, profiles, releases affected
    hint: Optional[str] = None

    def location(self) -> str:
        if not self.file or not self.line:
            return self.file or ""
        return f"{self.file}:{self.line}" + (f":{self.col}" if self.col else "")

    def format(self) -> str:
        """One line, compiler style: ``path:line:col: error[code]: message (hint)``."""
        loc = self.location()
        text = f"{self.level}[{self.code}]: {self.message}"
        if self.hint:
            text += f" ({self.hint})"
        from .redact import escape  # the one output rule: no control or bidi character of data reaches a terminal

        return escape(f"{loc}: {text}" if loc else text)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v not in (None, [])}


class RegistryError(Exception):
    """Raised when the registry or a profile cannot be loaded or resolved; carries the diagnostics."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = diagnostics
        super().__init__("\n".join(d.format() for d in diagnostics))
