"""What a launch or the vLLM it starts would refuse, found by ``validate`` (and so by the panel and the dry run,
which validate first): files a launcher knob names, the profile's ``[env]`` values against the types vLLM reads
them as, and the ``VLLM_*`` variables of the user's own environment, which every launch passes on to vLLM.
One located error each. Standard library only."""
from __future__ import annotations

import os
import re
from typing import Mapping, Optional

from .errors import Diagnostic

#: The file name of a diagnostic about the caller's environment (its variables have no file of their own).
ENVIRON = "<environment>"
#: Variables the launch derives from the caller's own value rather than replacing it.
MERGED = ("VLLM_PLUGINS",)


def check_knob_files(reg, rs, report) -> None:
    """A launcher knob whose value is a file (``sets.path``: ``CHAT_TEMPLATE`` -> ``--chat-template``) names one
    that exists here: vLLM would take any other text as the template itself."""
    from .consistency import set_by, value_where

    for r in sorted(rs.items.values(), key=lambda r: r.variant.knob):
        s = r.variant.sets
        if s is None or not getattr(s, "path", False) or r.value in (None, "") or r.value == r.variant.stock:
            continue
        if not os.path.isfile(os.path.expanduser(r.value)):
            report.add(Diagnostic("error", "missing-file",
                                  f"profile {rs.profile}: {r.variant.knob}={r.value}{set_by(rs, r)}: {s.name} takes a "
                                  "file and there is none at that path here (vLLM would read the value as the text "
                                  "itself); give a path to the file, or set it to \"\" for the checkpoint's own",
                                  *value_where(reg, rs, r), [r.variant.id, rs.profile]))


def _number_problem(value: str, type_: Optional[str]) -> Optional[str]:
    t = (type_ or "").replace(" | None", "")
    if value == "" or t not in ("int", "float"):
        return None
    pattern = r"[-+]?\d+" if t == "int" else r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?"
    return None if re.fullmatch(pattern, value.strip()) else f"vLLM reads it as {t}"


def check_env_values(reg, rs, report, iface) -> None:
    """The profile's ``[env]`` ``VLLM_*`` values parse as the type vLLM reads each as (an int, a float):
    vLLM would fail at its first read of the variable, after the launch."""
    for name, value in sorted(rs.extra_env.items()):
        e = iface.env(name) if name.startswith("VLLM_") else None
        why = _number_problem(value, e.type) if e is not None else None
        if why:
            f, ln, col = env_where(reg, rs, name)
            report.add(Diagnostic("error", "bad-env-value", f"profile {rs.profile}: [env] {name}={value!r}: {why} "
                                  f"(vLLM {iface.version})", f, ln, col, [rs.profile]))


def env_where(reg, rs, name: str) -> tuple:
    for prof_name in reversed(rs.chain):  # the profile of the chain that sets it
        prof = reg.profiles.get(prof_name)
        if prof is not None and name in prof.env:
            return reg.locate("profile", prof_name, ("env", name))
    return reg.locate("profile", rs.profile) if rs.profile in reg.profiles else (None, None, None)


def _knob_for(reg, name: str) -> str:
    """" (knob ATTN sets --attention-backend now)" when a launcher knob's mapping says it replaces ``name``."""
    for v in reg.variants.values():
        s = v.sets
        if s is not None and s.text and name in s.text and s.name != name:
            return f" (the knob {v.knob} sets {s.name} now: r9kctl launch --set {v.knob}=...)"
    return ""


def check_caller_env(reg, iface, report, environ: Optional[Mapping[str, str]] = None) -> None:
    """``VLLM_*`` variables of the caller's environment (a launch passes them all on) that the target vLLM does
    not read (``VLLM_ATTENTION_BACKEND``: removed; the attention backend is ``--attention-backend``, the knob
    ``ATTN``) or whose value it refuses."""
    environ = os.environ if environ is None else environ
    shell = {k: v for k, v in environ.items() if k.startswith("VLLM_")}
    for p in iface.check_env(shell):
        report.add(Diagnostic("error", "shell-env", f"{p.token}={shell.get(p.token, '')!r} is set in this environment "
                              f"and every launch passes it on: {p.message}; unset it{_knob_for(reg, p.token)}", ENVIRON, 1, 1, []))
    for name, value in sorted(shell.items()):
        e = iface.env(name)
        why = _number_problem(value, e.type) if e is not None else None
        if why:
            report.add(Diagnostic("error", "shell-env", f"{name}={value!r} is set in this environment and every "
                                  f"launch passes it on: {why} (vLLM {iface.version})", ENVIRON, 1, 1, []))


def check_env_conflicts(reg, rs, report, launch_env: Mapping[str, str],
                        environ: Optional[Mapping[str, str]] = None) -> None:
    """A ``VLLM_*`` variable of the caller's environment that the launch of ``rs`` sets to another value (its
    ``[env]`` or a launcher knob's variable): the server would not run what this shell says. Located at the
    profile's line (the launch's value wins there)."""
    environ = os.environ if environ is None else environ
    for name, value in sorted(launch_env.items()):
        if not name.startswith("VLLM_") or name in MERGED or name not in environ or environ[name] == value:
            continue
        f, ln, col = env_where(reg, rs, name)
        report.add(Diagnostic("error", "shell-env", f"profile {rs.profile} sets {name}={value!r}, this environment "
                              f"has {name}={environ[name]!r}: the launch would replace it; unset it, or set the value "
                              "in the profile", f, ln, col, [rs.profile]))


def check_profile(reg, rs, report, iface, environ: Optional[Mapping[str, str]] = None) -> None:
    """The checks of this module for one resolved set (``validate`` runs them after its launch check)."""
    from .vllm_map import serve_argv

    check_knob_files(reg, rs, report)
    check_env_values(reg, rs, report, iface)
    check_env_conflicts(reg, rs, report, serve_argv(rs, None, iface)[1], environ)
