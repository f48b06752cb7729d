"""Credentials never leave in output: which variables hold secrets (:func:`is_secret`) and how they are shown.

A credential's value is masked in everything printed or logged, and travels by reference only
(:func:`reference`). Also the one output rule for data (:func:`escape`: control and bidi characters escaped)
and the one maker of ``export NAME=value`` lines (:func:`export_line`). Standard library only.
"""
from __future__ import annotations

import re
import shlex
from typing import Mapping, Optional

_SECRET = re.compile(r"(?:^|_)(?:TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|KEY|APIKEY|"
                     r"AUTH|AUTHORIZATION|COOKIE|PRIVATE|SIGNATURE)(?:_|$)", re.IGNORECASE)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MASK = "***"


# C0 and C1 controls, DEL, and the bidi controls (embeddings, overrides, isolates, marks) of Unicode
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SGR = re.compile(r"\x1b\[[0-9;]*m")  # select graphic rendition: colour, bold (what rich draws with)


def _escaped(m: "re.Match") -> str:
    c = m.group(0)
    return c.encode("unicode_escape").decode("ascii") if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def escape(text, keep: str = "") -> str:
    """``text`` with every control and bidi character shown escaped, those in ``keep`` left as they are."""
    text = str(text)
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(lambda m: m.group(0) if m.group(0) in keep else _escaped(m), text)


def has_controls(text: str) -> bool:
    """Whether ``text`` holds a control or bidi character (what :func:`escape` shows escaped)."""
    return bool(_UNSAFE.search(text))


def drop_controls(text: str) -> str:
    """``text`` without its control and bidi characters (where an escape's extra width would not fit: the panel)."""
    return _UNSAFE.sub("", text)


def escape_output(text: str, colour: bool = False) -> str:
    """What a command writes to its streams: :func:`escape` keeping newline and tab; with ``colour`` (rich
    drawing on a terminal) the SGR sequences too (data reaches rich already escaped: see ``r9kctl/output.py``)."""
    if not colour:
        return escape(text, "\n\t")
    out, last = [], 0
    for m in _SGR.finditer(text):
        out += [escape(text[last:m.start()], "\n\t"), m.group(0)]
        last = m.end()
    out.append(escape(text[last:], "\n\t"))
    return "".join(out)


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


def export_line(name: str, value: str, export: bool = True) -> str:
    """``export NAME='value'`` for a POSIX shell (without ``export``: an env file for ``set -a; . FILE``);
    a credential is named in a comment; a name a shell would not take raises ValueError."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not an environment variable name")
    if is_secret(name) and value:
        return f"# {name}={MASK} (a credential: masked, not exported; set it in your own environment)"
    return f"{'export ' if export else ''}{name}={sh_quote(value)}"


_UNSAFE_IN_WORD = re.compile("(?:(?![\n\t])" + _UNSAFE.pattern + ")+")


def sh_quote(value: str) -> str:
    """``value`` as one POSIX shell word that prints safely: :func:`shlex.quote`, with runs of control or
    bidi characters as ``"$(printf '\\ooo...')"``."""
    if not _UNSAFE_IN_WORD.search(value):
        return shlex.quote(value)
    out, last = [], 0
    for m in _UNSAFE_IN_WORD.finditer(value):
        if m.start() > last:
            out.append(shlex.quote(value[last:m.start()]))
        out.append("\"$(printf '" + "".join(f"\\{b:03o}" for b in m.group(0).encode("utf-8")) + "')\"")
        last = m.end()
    if last < len(value):
        out.append(shlex.quote(value[last:]))
    return "".join(out)


# ---- credentials a launch needs: carried by reference, never by value
#: How a credential's value is written where it would otherwise travel in clear (the launch manifest, vLLM's
#: ``--additional-config``, rank records): its name's rule says "secret", so only a fingerprint is kept and
#: each process takes the value from its own environment (the plugin checks it is there and the same).
REFERENCE_PREFIX = "r9k-credential:sha256:"
_REFERENCE = re.compile(re.escape(REFERENCE_PREFIX) + r"[0-9a-f]{16}")


def fingerprint(name: str, value: str) -> str:
    """16 hex digits of SHA-256 over the name and the value: tells two values apart without showing either."""
    import hashlib

    return hashlib.sha256(f"r9k-credential\0{name}\0{value}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def is_reference(value) -> bool:
    return isinstance(value, str) and bool(_REFERENCE.fullmatch(value))


def reference(name: str, value: str) -> str:
    """What a manifest carries for ``name=value``: the value, or a credential's reference."""
    if not is_secret(name) or not value or is_reference(value):
        return value
    return REFERENCE_PREFIX + fingerprint(name, value)


def referenced(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` with every credential's value replaced by its reference."""
    return {k: reference(k, v) for k, v in env.items()}


def reference_problem(name: str, ref: str, environ: Mapping[str, str], profile: str = "") -> Optional[str]:
    """Why this process cannot use the credential a manifest names by ``ref`` (None when ``environ`` holds
    the very value): missing, or a different value (the fingerprints shown, never the values)."""
    whose = f"profile '{profile}'" if profile else "the profile"
    have = environ.get(name)
    if have is None or have == "":
        return (f"{whose} sets {name}, a credential the launch carries by reference only "
                f"({ref[len(REFERENCE_PREFIX):]}); it is not set in this process's environment: export it "
                "before starting vLLM")
    if reference(name, have) != ref:
        return (f"{name} in this process's environment (fingerprint {fingerprint(name, have)}) is not the value "
                f"{whose} sets (fingerprint {ref[len(REFERENCE_PREFIX):]})")
    return None
