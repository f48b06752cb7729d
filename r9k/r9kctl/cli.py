"""``r9kctl``: the command line of r9k-stack.

Each subcommand lives in its own module ``r9k.r9kctl.cmd_<name>`` with ``add_parser(subparsers)``
(cheap: no heavy imports) and a ``run(args) -> int`` set as the parser's ``func``. Exit codes: 0 fine,
1 warnings under ``--strict`` (or a comparison that failed its test), 2 errors, 3 a bug (see :func:`main`).

The global options (``--registry``, ``--profiles-dir``, ``--plain``) are accepted before or after the
subcommand. They reach the commands as arguments (``args.registry_root``, ``args.profile_dirs``; see
:func:`r9k.r9kctl.common.registry_location`), never through this process's environment.
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

from ..registry import envvars
from ..registry.errors import RegistryError
from .output import Exit

# The examples each subcommand's --help ends with (by command path, "eval record" for a nested one); a
# command whose module has an epilog keeps it. Every example runs as printed on a fresh clone
# (tests/core/test_cli_conventions.py runs the ones marked safe).
EXAMPLES: dict[str, str] = {
    "list": """
r9kctl list                                     every variant
r9kctl list --category fusion --status default-on
r9kctl list --tp 2 --search hc                  with the TP2 default, id/knob/summary containing 'hc'
r9kctl list --format ids                        one id a line (scripts)
""",
    "show": """
r9kctl show R9K_HC_FP8_DECODE                   by knob
r9kctl show router_gemm                         by variant id
r9kctl show R9K_ROUTER --format json
""",
    "resolve": """
r9kctl resolve --profile tp2-default --non-stock
r9kctl resolve --profile tp4-default --format env > r9k.env     lines a shell can source
r9kctl resolve --profile tp4-default --tp 2 --set R9K_ROUTER=stock
""",
    "validate": """
r9kctl validate --all                           the registry and every profile
r9kctl validate --profile tp2-default --strict  warnings fail too (exit 1)
r9kctl validate --profile tp4-default --format json
""",
    "diff": """
r9kctl diff v0.3.0 v0.3.1                       what a release changed
r9kctl diff v0.3.1 v0.3.2 --format markdown     a release-notes table
r9kctl diff stock tp4-default --tp 4            profiles too
""",
    "profiles": """
r9kctl profiles                                 name, what it extends, model, TP, description
r9kctl profiles --format names                  one name a line (scripts, completion)
""",
    "releases": """
r9kctl releases                                 version, date, the release before it, headline
r9kctl releases --format json
""",
    "launch": """
r9kctl launch --profile tp4-default --dry-run   the exact vllm serve command and environment
r9kctl launch --profile cpu-smoke               no GPU, no download: a tiny model on vLLM's CPU backend
r9kctl launch --profile tp2-default -- --port 8001 --max-num-seqs 4    extra vllm serve arguments after --
""",
    "tui": """
r9kctl tui                                      the control panel on tp4-default
r9kctl tui --profile tp2-default --tp 4
r9kctl tui --keymap keys.toml                   keys remapped by binding id ('?' in the panel lists them)
""",
    "status": f"""
r9kctl status --url http://127.0.0.1:8000       the set a running server uses
r9kctl status --file "${envvars.STATUS_FILE.name}" --format json
""",
    "schema": """
r9kctl schema profile > profile.schema.json     JSON Schema of profile files (Taplo, VS Code)
r9kctl schema profile --check profiles/profile.schema.json    exit 1 when the shipped copy is stale
""",
    "completion": """
source <(r9kctl completion bash)                bash, this shell (add it to ~/.bashrc to keep it)
r9kctl completion zsh > ~/.zfunc/_r9kctl        zsh (with fpath+=~/.zfunc before compinit)
r9kctl completion fish > ~/.config/fish/completions/r9kctl.fish
""",
    "bench": """
r9kctl bench decode-step --profile tp4-default --against stock
""",
    "bench decode-step": """
r9kctl bench decode-step --profile tp4-default --against stock --ablate
""",
    "eval compare": """
r9kctl eval compare a.jsonl b.jsonl
""",
    "eval record": """
r9kctl eval record --url http://127.0.0.1:8000 --dataset arith-smoke --out a.jsonl --api completions
""",
    "bisect plan": """
r9kctl bisect plan --good round2-numerics --bad tp4-default --dir bisect/ --dataset arith-smoke
""",
    "bisect status": """
r9kctl bisect status --dir bisect/
""",
    "bisect run": """
r9kctl bisect run --dir bisect/ --launch 'r9kctl launch -p {profile} -- --port {port}' --url-template http://127.0.0.1:{port}
""",
    "doctor": """
r9kctl doctor                                   against the installed vLLM
r9kctl doctor --vllm-src DIR                     against another vLLM's sources (a folder holding vllm/, or a wheel)
""",
    "gate": """
r9kctl gate --status                            the gate states, nothing run
r9kctl gate --profile cpu-smoke                 run the gates of a profile's non-stock variants here
r9kctl gate --all --dry-run                     what would run
""",
    "recipes": """
r9kctl recipes                                   every shipped profile, markdown
r9kctl recipes -p cpu-smoke --format json        one profile as JSON
r9kctl recipes --release v0.3.2 --platform cpu   every model x TP size on cpu at the release's defaults
r9kctl recipes --vllm-version 0.33               the switches vLLM 0.33 has
""",
    "bench serve": """
r9kctl bench serve --profiles cpu-flash-next-stock,cpu-flash-next --concurrency 1,4 --repeats 3 --out bench-serve
""",
}
for _group, _subs in (("bisect", ("plan", "run", "status")), ("eval", ("record", "compare"))):  # its commands' own
    EXAMPLES[_group] = "\n".join(EXAMPLES[f"{_group} {s}"].strip("\n") for s in _subs)


_ROLE = re.compile(r":(?:func|mod|class|meth|attr|data|obj):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``( {2,})?")


def plain(text: str) -> str:
    """RST markup of a docstring as plain ``--help`` text: ``literal`` and :func:`name` lose their marks
    (a literal followed by column padding keeps the next column where it was)."""
    text = _ROLE.sub(r"\1", text)
    return _LITERAL.sub(lambda m: m[1] + ((m[2] + "    ") if m[2] else ""), text)


# Subcommand modules, in the order ``--help`` lists them.
COMMANDS = [
    "list", "show", "resolve", "validate", "diff", "profiles", "releases", "launch", "doctor", "tui", "status", "gate",
    "eval", "bisect", "bench", "schema", "completion", "recipes",
]

GLOBAL_OPTIONS = (  # (flags, dest, argparse keywords)
    (("--registry",), "registry", dict(metavar="DIR", help="registry tree to use instead of the packaged one "
                                                              f"(also ${envvars.REGISTRY.name})")),
    (("--profiles-dir",), "profiles_dir", dict(metavar="DIR", action="append",
                                               help="extra folder of profiles (repeatable; later folders win; "
                                                    f"also ${envvars.PROFILES_DIR.name})")),
    (("--plain",), "plain", dict(action="store_true", help="plain text even on a terminal")),
)
AFTER = "after_"  # dest prefix of a global option given after the subcommand


class _Version(argparse._VersionAction):
    """``--version``: the installed version is looked up when asked for (``importlib.metadata`` is a
    start-up cost of every command otherwise)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            self.version = f"r9kctl {version('r9k-stack')}"
        except PackageNotFoundError:
            self.version = "r9kctl unknown (not installed)"
        super().__call__(parser, namespace, values, option_string)


def _add_globals(p: argparse.ArgumentParser, after: bool) -> None:
    group = p.add_argument_group("global options (before or after the command)") if after else p
    for flags, dest, kw in GLOBAL_OPTIONS:
        kw = dict(kw)
        if after:
            kw["default"] = argparse.SUPPRESS
        group.add_argument(*flags, dest=(AFTER + dest) if after else dest, **kw)


def _subparsers(p: argparse.ArgumentParser):
    for action in p._actions:  # argparse keeps no public list of a parser's subcommands
        if isinstance(action, argparse._SubParsersAction):
            yield action


#: The human-readable ``--format``: commands call it ``table`` or ``text``; every command accepts both.
HUMAN_FORMATS = ("table", "text")


def _one_format_vocabulary(p: argparse.ArgumentParser) -> None:
    """A command's ``--format`` accepts both names of the human-readable form (``table`` and ``text``),
    handing the command the one it knows; its help names both."""
    for action in p._actions:
        if "--format" not in action.option_strings or not action.choices:
            continue
        own = next((c for c in action.choices if c in HUMAN_FORMATS), None)
        if own is None:
            continue
        choices = list(action.choices)
        action.type = lambda v, own=own: own if v in HUMAN_FORMATS else v
        action.metavar = "{" + ",".join(["table|text" if c == own else c for c in choices]) + "}"
        if action.help and "%(choices)" in action.help:
            action.help = action.help.replace("%(choices)s", action.metavar)


def add_group(subparsers, name: str, help_: str, description: str, dest: str, commands: str):
    """A command whose own subcommands do the work (``r9kctl eval compare``): its parser, ``description``
    shown as written (see :func:`_finish`), and the action its subcommands are added to. One of them is
    required; ``commands`` (``"{compare,record}"``) is how the usage and the error name them."""
    p = subparsers.add_parser(name, help=help_, description=description)
    return p, p.add_subparsers(dest=dest, metavar=commands, required=True)


def _finish(name: str, p: argparse.ArgumentParser, help_: str | None) -> None:
    """Every subcommand (and its own subcommands): a description, the examples, the global options; its
    description and epilog shown as written (line breaks kept)."""
    _one_format_vocabulary(p)
    if not p.description and help_:
        p.description = help_[0].upper() + help_[1:] + "."
    ex = EXAMPLES.get(name)
    if ex and not p.epilog:
        p.epilog = "examples:\n" + "\n".join(f"  {line}" for line in ex.strip("\n").splitlines())
    if p.formatter_class is argparse.HelpFormatter:
        p.formatter_class = argparse.RawDescriptionHelpFormatter
    # descriptions come from docstrings, which refer to a control variable as envvars.NAME: show its name
    p.description, p.epilog = (plain(envvars.spell(t)) if t else t for t in (p.description, p.epilog))
    for action in p._actions:  # an option's help is plain text too
        if isinstance(action.help, str):
            action.help = plain(action.help)
    _add_globals(p, after=True)
    for action in _subparsers(p):
        helps = {a.dest: a.help for a in action._choices_actions}
        for sub_name, sub_p in action.choices.items():
            _finish(f"{name} {sub_name}", sub_p, helps.get(sub_name))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, just that subcommand's module is imported (a faster start)."""
    p = argparse.ArgumentParser(
        prog="r9kctl",
        description="Declarative, checked kernel variants and serving profiles for vLLM.",
        epilog="The global options work before or after the command (r9kctl list --registry DIR).\n"
               "'r9kctl COMMAND --help' has each command's options and examples; 'r9kctl completion bash'\n"
               "prints a completion script (bash, zsh, fish).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action=_Version, version="r9kctl")
    _add_globals(p, after=False)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in ([only] if only else COMMANDS):
        try:
            mod = importlib.import_module(f"r9k.r9kctl.cmd_{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"r9k.r9kctl.cmd_{name}":
                continue  # a command not shipped in this build
            raise
        mod.add_parser(sub)
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name, sp in sub.choices.items():
        _finish(name, sp, helps.get(name))
    return p


def merge_globals(args: argparse.Namespace) -> argparse.Namespace:
    """One value per global option (given after the command wins; profile folders add up), then the
    registry location the commands load from."""
    from .common import registry_location

    for _flags, dest, _kw in GLOBAL_OPTIONS:
        after = getattr(args, AFTER + dest, None)
        if hasattr(args, AFTER + dest):
            delattr(args, AFTER + dest)
        if after is None:
            continue
        if dest == "profiles_dir":
            args.profiles_dir = (args.profiles_dir or []) + after
        elif dest == "plain":
            args.plain = args.plain or after
        else:
            setattr(args, dest, after)
    args.registry_root, args.profile_dirs = registry_location(args)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run one command. Exit codes: 0 fine, 1 warnings under --strict or a failed comparison, 2 bad input
    (one located line per fault), 3 an unexpected exception: one line saying it is a bug, and how to get the
    traceback (``envvars.DEBUG`` set to 1). A traceback is never printed otherwise."""
    words = sys.argv[1:] if argv is None else list(argv)
    if words[:1] == ["__complete"]:  # the shell completion scripts ask here (r9kctl completion SHELL)
        from .cmd_completion import complete

        return complete(words[1:], build_parser())
    try:
        return _main(words)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except RegistryError as exc:  # a file that cannot be read, raised from anywhere: its located lines
        for d in exc.diagnostics:
            sys.stderr.write(d.format() + "\n")
        return 2
    except Exception as exc:  # noqa: BLE001 - the catch-all: one line, never a bare traceback
        if envvars.DEBUG.on():
            raise
        return internal_error(exc, words)


def internal_error(exc: BaseException, words: list[str]) -> int:
    """Report an unexpected exception in one line; exit 3."""
    text = " ".join(str(exc).split())
    if len(text) > 300:
        text = text[:300] + "..."
    where = ""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        where = f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
    cmd = " ".join(["r9kctl", *words])
    sys.stderr.write(f"r9kctl: error[internal]: {type(exc).__name__}{': ' + text if text else ''}{where}; this is a "
                     f"bug in r9kctl, please report it (the traceback: {envvars.DEBUG.name}=1 {cmd})\n")
    return 3


def _mistyped_command(words: list[str]) -> int | None:
    """A first word that is no command, said in one located line with the nearest command (exit 2); None when
    the words name no command at all (argparse's usage and help then)."""
    import difflib
    import shlex

    takes_value = {f for flags, _d, kw in GLOBAL_OPTIONS if kw.get("action") != "store_true" for f in flags}
    i = 0
    while i < len(words):
        w = words[i]
        if w in takes_value:
            i += 2
            continue
        if w.startswith("-"):
            i += 1
            continue
        near = difflib.get_close_matches(w, COMMANDS, n=1, cutoff=0.6)
        hint = f" (did you mean {near[0]}?)" if near else f" (commands: {', '.join(COMMANDS)})"
        col = len("r9kctl ") + 1 + sum(len(shlex.quote(x)) + 1 for x in words[:i])
        sys.stderr.write(f"<command line>:1:{col}: error[usage]: {w!r} is not an r9kctl command{hint}\n")
        return 2
    return None


def _main(words: list[str]) -> int:
    # the first word naming a command; an option's value never names one here (they are paths and names)
    chosen = next((w for w in words if w in COMMANDS), None)
    if chosen is None:
        wrong = _mistyped_command(words)
        if wrong is not None:
            return wrong
    parser = build_parser(chosen)
    try:
        args = merge_globals(parser.parse_args(words))
    except SystemExit as exc:  # argparse: usage errors exit 2, --help and --version exit 0
        return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    from . import output

    output.set_plain(bool(args.plain))
    args.argv = words  # where each value was typed: --set and --tp errors are located on the command line
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        if chosen == "tui":  # the panel draws the terminal itself (its widgets escape data: tui/...)
            return int(args.func(args) or 0)
        return int(output.guarded(args.func, args) or 0)
    except Exit as exc:  # a helper reported what is wrong
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
