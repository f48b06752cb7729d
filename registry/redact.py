"""Credentials never leave in output: the one rule for which variables hold secrets and how they are shown.

A variable whose name looks like a credential (a ``TOKEN``, ``SECRET``, ``PASSWORD``, ``KEY``, ... part
between underscores: ``HF_TOKEN``, ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``; not ``MAX_TOKENS``) has
its value masked in everything this project prints or logs: dry runs, ``resolve --format env``, status,
the plugin's warnings. Lines meant to be sourced name such a variable in a comment instead of exporting a
masked value, so that sourcing them never replaces the real one.

Also the one place where an ``export NAME=value`` line is made: the value quoted for POSIX shells
(:func:`shlex.quote`), the name checked, so that no output of this project runs code when sourced.
Standard library only (the plugin imports it on its startup path).
"""
from __future__ import annotations

import re
import shlex
from typing import Mapping

_SECRET = re.compile(r"(?:^|_)(?:TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|KEY|APIKEY|"
                     r"AUTH|AUTHORIZATION|COOKIE|PRIVATE|SIGNATURE)(?:_|$)", re.IGNORECASE)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MASK = "***"


def is_secret(name: str) -> bool:
    """Whether a variable of this name holds a credential (its value is never shown)."""
    return bool(_SECRET.search(str(name)))


def mask(name: str, value) -> str:
    """``value`` as it may be shown: :data:`MASK` for a credential's variable (when set)."""
    if value in (None, ""):
        return "" if value is None else value
    return MASK if is_secret(name) else str(value)


def masked(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` with every credential's value masked."""
    return {k: mask(k, v) for k, v in env.items()}


def export_line(name: str, value: str) -> str:
    """``export NAME='value'`` for a POSIX shell; a credential is named in a comment (its value masked,
    nothing exported); a name a shell would not take as a variable raises ValueError (validation refuses
    such names first)."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not an environment variable name")
    if is_secret(name) and value:
        return f"# {name}={MASK} (a credential: masked, not exported; set it in your own environment)"
    return f"export {name}={shlex.quote(value)}"
