"""``r9kctl completion SHELL``: a completion script for bash, zsh or fish, and the one completer in Python
(``r9kctl __complete WORD...``) that the scripts call. It walks the real argument parser, so commands, options
and their choices are never listed twice, and completes profile, release and knob names from the registry.

Protocol: ``r9kctl __complete [--registry DIR ...] -- W1 ... WN`` where WN is the word being completed
(possibly empty); one candidate a line on stdout. No line means "complete a file name" (the scripts fall
back to the shell's own file completion).
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from ..registry import load_registry, RegistryError

from .common import registry_location

# option destination -> what its value names
PROFILE_DESTS = {"profile", "good", "bad", "against"}
FILE_DESTS = {"registry", "profiles_dir", "keymap", "dir", "out", "file", "import_junit", "into", "dataset"}
# positional destinations, by command path
POSITIONALS = {"show": "variant", "diff": "side", "gate": "variant", "schema": "choice", "completion": "choice"}


def _registry(words: list[str]):
    """The registry at the location the command line names (--registry / --profiles-dir), or None."""
    ns = argparse.Namespace(registry=None, profiles_dir=None)
    for i, w in enumerate(words[:-1]):  # the global options typed so far decide which registry to read
        for opt, dest in (("--registry", "registry"), ("--profiles-dir", "profiles_dir")):
            value = w.split("=", 1)[1] if w.startswith(opt + "=") else words[i + 1] if w == opt else None
            if value is None:
                continue
            if dest == "registry":
                ns.registry = value
            else:
                ns.profiles_dir = (ns.profiles_dir or []) + [value]
    try:
        return load_registry(*registry_location(ns))
    except (RegistryError, OSError):
        return None


def _names(kind: str, words: list[str]) -> list[str]:
    """Names of kind ``kind`` in the registry the command line names."""
    reg = _registry(words)
    if reg is None:
        return []
    knobs = sorted(v.knob for v in reg.variants.values())
    by_kind = {
        "profile": lambda: sorted(reg.profiles),
        "release": lambda: list(reg.release_order()),
        "side": lambda: sorted(reg.profiles) + list(reg.release_order()),
        "area": lambda: sorted({v.area for v in reg.variants.values()}),
        "category": lambda: sorted({v.category for v in reg.variants.values()}),
        "status": lambda: sorted({v.status.state for v in reg.variants.values()}),
        "knob": lambda: knobs,
        "variant": lambda: knobs + sorted(reg.variants),
    }
    return by_kind[kind]() if kind in by_kind else []


def _knob_values(knob: str, words: list[str]) -> list[str]:
    """The values worth offering for one knob (by knob or variant id, any case): a bool's 1 and 0, an enum's
    choices, otherwise its special values, stock value and shipped defaults."""
    reg = _registry(words)
    if reg is None:
        return []
    v = next((v for v in reg.variants.values() if knob.upper() in (v.knob.upper(), v.id.upper())
              or knob.upper() in (k.upper() for k in v.also_knobs)), None)
    if v is None:
        return []
    if v.type == "bool":
        return ["1", "0"]
    if v.type == "enum":
        return list(v.choices)
    return list(dict.fromkeys(val for val in [*v.special, v.stock, *v.defaults.values()] if val not in (None, "")))


def _option_strings(p: argparse.ArgumentParser) -> list[str]:
    out = []
    for a in p._actions:
        if a.help == argparse.SUPPRESS:
            continue
        out += [s for s in a.option_strings if s.startswith("--")] or list(a.option_strings)
    return out


def _value_candidates(action: argparse.Action, words: list[str]) -> Optional[list[str]]:
    """Candidates for an option's value; None: a file name."""
    dest = action.dest.removeprefix("after_")
    if action.choices:
        return [str(c) for c in action.choices]
    if dest in PROFILE_DESTS:
        return _names("profile", words)
    if dest in ("release", "releases"):
        return _names("release", words)
    if dest == "sets":
        cur = words[-1] if words else ""
        if "=" in cur:  # KNOB=VALUE: the values that knob takes
            knob = cur.split("=", 1)[0]
            return [f"{knob}={v}" for v in _knob_values(knob, words)]
        return [k + "=" for k in _names("knob", words)]
    if dest in ("area", "category", "status"):
        return _names(dest, words)
    if dest in FILE_DESTS:
        return None
    return []


def _sub(p: argparse.ArgumentParser) -> Optional[argparse._SubParsersAction]:
    return next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)


def candidates(words: list[str], parser: argparse.ArgumentParser) -> Optional[list[str]]:
    """What may come as the last word of ``r9kctl WORDS`` (the last word is the prefix being typed), by
    ``parser`` (``cli.build_parser()``)."""
    *done, cur = words or [""]
    path: list[str] = []
    expecting: Optional[argparse.Action] = None
    positional = 0
    after_dashdash = False
    for w in done:
        if after_dashdash:
            continue
        if expecting is not None:
            expecting = None
            continue
        if w == "--":
            after_dashdash = True
            continue
        if w.startswith("-"):
            a = next((a for a in parser._actions if w.split("=", 1)[0] in a.option_strings), None)
            if a is not None and a.nargs != 0 and "=" not in w:
                expecting = a
            continue
        sub = _sub(parser)
        if sub is not None and w in sub.choices:
            parser = sub.choices[w]
            path.append(w)
            positional = 0
            continue
        positional += 1
    if after_dashdash:
        return []  # vLLM's own arguments
    if expecting is not None:
        return _value_candidates(expecting, words)
    if cur.startswith("-"):
        return _option_strings(parser)
    sub = _sub(parser)
    if sub is not None:
        return [str(c) for c in sub.choices]
    cmd = " ".join(path)
    kind = POSITIONALS.get(cmd)
    if kind == "choice":
        return next(([str(c) for c in a.choices] for a in parser._actions if not a.option_strings and a.choices), [])
    if kind:
        return _names(kind, words)
    return _option_strings(parser)


def complete(argv: list[str], parser: argparse.ArgumentParser) -> int:
    words = argv[1:] if argv[:1] == ["--"] else argv
    try:
        found = candidates(words, parser)
    except Exception:  # noqa: BLE001 - a completion must never print a traceback into the prompt
        return 0
    cur = words[-1] if words else ""
    if found is None:
        return 0
    out = [c for c in found if c.startswith(cur)]
    if not out and found:
        low = cur.lower()  # knobs typed in lower case
        out = [c for c in found if c.lower().startswith(low)]
    sys.stdout.write("".join(c + "\n" for c in out))
    return 0


BASH = r"""# bash completion for r9kctl (r9kctl completion bash)
_r9kctl() {
    # the words as typed: bash splits KNOB=VALUE at '=' (COMP_WORDBREAKS) into KNOB, =, VALUE; glue them back
    local -a words=()
    local i w n
    for ((i = 1; i <= COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        n=${#words[@]}
        if ((n)) && [[ $w == "=" || ${words[n-1]} == *= ]]; then
            words[n-1]+=$w
        else
            words+=("$w")
        fi
    done
    local full=${words[${#words[@]}-1]}
    local piece=${COMP_WORDS[COMP_CWORD]}
    local IFS=$'\n'
    local -a out
    out=($(r9kctl __complete -- "${words[@]}" 2>/dev/null))
    if [ ${#out[@]} -eq 0 ]; then
        compopt -o default 2>/dev/null
        COMPREPLY=()
        return 0
    fi
    if [[ $full == *=* && $piece != "$full" ]]; then
        # readline replaces only the text after the '=' (a word break), even where COMP_WORDS ends with the
        # '=' itself: offer the values alone, never an '=' of their own (KNOB==VALUE)
        local head="${full%%=*}="
        out=("${out[@]#"$head"}")
    fi
    COMPREPLY=("${out[@]}")
    if [ ${#out[@]} -eq 1 ] && [[ ${out[0]} == *= ]]; then
        compopt -o nospace 2>/dev/null
    fi
}
complete -F _r9kctl r9kctl
"""

ZSH = r"""#compdef r9kctl
# zsh completion for r9kctl (r9kctl completion zsh > a folder on $fpath, as _r9kctl)
_r9kctl() {
    local -a out
    out=("${(@f)$(r9kctl __complete -- "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    out=(${out:#})
    if (( ${#out} == 0 )); then
        _files
        return
    fi
    local -a eq plain
    eq=(${(M)out:#*=})
    plain=(${out:#*=})
    (( ${#plain} )) && compadd -- $plain
    (( ${#eq} )) && compadd -S '' -- $eq
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _r9kctl "$@"
else
    compdef _r9kctl r9kctl
fi
"""

FISH = r"""# fish completion for r9kctl (r9kctl completion fish > ~/.config/fish/completions/r9kctl.fish)
function __r9kctl_complete
    set -l words (commandline -opc)[2..-1] (commandline -ct)
    set -l out (r9kctl __complete -- $words 2>/dev/null)
    if test (count $out) -eq 0
        __fish_complete_path (commandline -ct)
    else
        printf '%s\n' $out
    end
end
complete -c r9kctl -f -a '(__r9kctl_complete)'
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH, "fish": FISH}


def add_parser(sub):
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh, fish)")
    p.add_argument("shell", choices=tuple(SCRIPTS))
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    print(SCRIPTS[args.shell], end="")
    return 0
