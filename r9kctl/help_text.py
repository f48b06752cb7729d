"""The examples each subcommand's ``--help`` ends with (by command path, ``"eval record"`` for a nested
one). A command whose module already has an epilog keeps it. Every example here runs as printed on a
fresh clone (tests/core/test_cli_conventions.py runs the ones marked safe)."""
from __future__ import annotations

import re

from ..registry import envvars

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
