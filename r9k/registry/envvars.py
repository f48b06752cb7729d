"""This project's own environment variables: every one of them, declared once.

A *knob* (``R9K_ROUTER``, ``UTIL``) is registry data (``registry/variants/*.toml``); a *control variable*,
declared here, says where things are or how the tools behave. Everything reads a control variable through
:meth:`EnvVar.get` (or :func:`cache_dir`), never by spelling its name. Standard library only.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

#: Every knob and control variable of this project starts so; an unknown name with it is a likely typo.
PREFIX = "R9K_"


@dataclass(frozen=True)
class EnvVar:
    name: str
    type: str  # "path", "paths" (os.pathsep-separated), "bool" ("1" = on), "int" or "str"
    default: Optional[str]  # what unset means, in words where it is computed (None: not given)
    meaning: str
    readers: tuple[str, ...]  # the modules that read it
    vllm: bool = False  # declared to vLLM's variable registry: known there and copied to Ray workers

    def get(self, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
        """The value in ``environ`` (default ``os.environ``); None when unset or empty."""
        value = (os.environ if environ is None else environ).get(self.name)
        return value or None

    def on(self, environ: Optional[Mapping[str, str]] = None) -> bool:
        """For a bool: set to ``1``."""
        return self.get(environ) == "1"

    def paths(self, environ: Optional[Mapping[str, str]] = None) -> list[Path]:
        """For a path list: its entries, ``~`` expanded, empty entries dropped."""
        value = self.get(environ) or ""
        return [Path(p).expanduser() for p in value.split(os.pathsep) if p]


_v = EnvVar  # short, for the table below


# ------------------------------------------------------------------ what a user or the launcher sets

MANIFEST = _v("R9K_MANIFEST", "path", None,
              "a launch manifest file (JSON) the plugin loads instead of resolving: written and named by the first "
              "process of a server started by hand for the processes it starts, and by r9kctl bisect per step "
              "(r9kctl launch carries its manifest in vLLM's --additional-config instead)",
              ("plugin", "plugin.startup", "r9kctl.evidence.bisect"), vllm=True)
PROFILE = _v("R9K_PROFILE", "str", None,
             "started by hand (no carried manifest, none named): the profile the plugin's first process resolves "
             "once, handing the manifest on to the processes it starts",
             ("plugin", "plugin.startup", "r9kctl.evidence.bisect"), vllm=True)
TP = _v("R9K_TP", "int", "the profile's TP size", "the TP size to resolve R9K_PROFILE at (started by hand)",
        ("plugin", "plugin.startup", "r9kctl.evidence.bisect"), vllm=True)
STRICT = _v("R9K_STRICT", "bool", "0",
            "warnings count as errors where a profile is resolved (r9kctl, a plugin started by hand); a launched "
            "server takes strict mode from its manifest", ("registry.resolve",), vllm=True)
SELFCHECK = _v("R9K_SELFCHECK", "bool", "on in strict mode, else off",
               "1: each installed kernel runs once at start-up on a probe at its layer's shapes against its stock "
               "path (a failure keeps vLLM's path for that op, or refuses the start in strict mode); 0: never",
               ("plugin.selfcheck",), vllm=True)
STATUS_FILE = _v("R9K_STATUS_FILE", "path", "a file under the cache directory, chosen by the plugin",
                 "where the plugin writes what it installed and counted; r9kctl status reads it",
                 ("plugin.startup", "plugin.report", "r9kctl.cmd_status"), vllm=True)
CACHE_DIR = _v("R9K_CACHE_DIR", "path", "$XDG_CACHE_HOME/r9k, else ~/.cache/r9k",
               "parse cache, manifests, status files, tiny models (see cache_dir())",
               ("registry.loader", "r9kctl.launch", "plugin.tiny_model", "plugin.startup"), vllm=True)
REGISTRY = _v("R9K_REGISTRY", "path", "the packaged registry", "the registry tree to load instead",
              ("registry.loader", "plugin.startup"), vllm=True)
PROFILES_DIR = _v("R9K_PROFILES_DIR", "paths", "only the packaged profiles",
                  "extra profile folders, later ones win over earlier ones and the packaged ones",
                  ("registry.loader", "plugin.startup"), vllm=True)
LEDGER = _v("R9K_LEDGER", "path", "registry/gates/ledger.jsonl of the tree in use",
            "the gate ledger to read and append to", ("registry.ledger",))
REPO_ROOT = _v("R9K_REPO_ROOT", "path", "the package's parent folder",
               "the root that a variant's implementation sources are relative to", ("registry.ledger",))
ACCEPT_IMPORTED_GATES = _v("R9K_ACCEPT_IMPORTED_GATES", "bool", "0",
                           "1: a strict launch accepts gates fresh only on imported (unverified) records of its "
                           "platform", ("registry.ledger",), vllm=True)
NO_CACHE = _v("R9K_NO_CACHE", "bool", "0", "1: parse every TOML file and gate module again (no parse cache)",
              ("registry.loader", "registry.gatedeps"))
DEBUG = _v("R9K_DEBUG", "bool", "0", "1: r9kctl shows the traceback of an unexpected error instead of one line",
           ("r9kctl.cli",))
PLAIN = _v("R9K_PLAIN", "bool", "0", "1: plain text output even on a terminal (like r9kctl --plain)",
           ("r9kctl.output",))

# ------------------------------------------------------------------ what the tests and gate runner set

GATE_EVENTS = _v("R9K_GATE_EVENTS", "path", None, "where the gate pytest plugin writes its events (JSON lines)",
                 ("r9kctl.evidence.pytest_plugin",))
GATE_SELECT = _v("R9K_GATE_SELECT", "str", None, "the gate tests the pytest plugin lets run",
                 ("r9kctl.evidence.pytest_plugin",))
MUTATE = _v("R9K_MUTATE", "str", None, "JSON list of kernel mutations the mutation-test pytest plugin applies at "
            "import (tests/evidence/test_mutation.py)", ("r9kctl.evidence.mutate",))
TEST_SEED = _v("R9K_TEST_SEED", "int", "a fixed seed per test", "the random seed of the kernel and plugin tests",
               ("kernels.conftest", "tests.plugin.conftest"))

# ------------------------------------------------------------------ read by the kernels' GPU tooling

VLLM_SRC = _v("R9K_VLLM_SRC", "path", "the installed vllm package's parent folder",
              "where vLLM's sources are, for the kernel benchmarks that time vLLM's own kernels on a machine "
              "without vLLM installed", ("kernels._triton.vllm_peer",))
TUNED_DEVICE = _v("R9K_TUNED_DEVICE", "str", "the name of this process's GPU",
                  "whose tuned kernel configurations (tuned_<device>.json) to use", ("kernels._triton.tuned",))

# ------------------------------------------------------------------ set by the plugin for its own processes

LAUNCH_HASH = _v("_R9K_LAUNCH_HASH", "str", None,
                 "the hash of the first plugin process's manifest (carried, named or resolved); every later process "
                 "of the node must match it", ("plugin.startup", "plugin"), vllm=True)
LAUNCH_PID = _v("_R9K_LAUNCH_PID", "int", None, "the process that set _R9K_LAUNCH_HASH",
                ("plugin.startup",), vllm=True)
SERVER = _v("_R9K_SERVER", "str", None,
            "the server instance id (r9kctl launch sets it; made by the first process of a server started by "
            "hand; never in vLLM's config, whose hash keys the compile cache): names the status and counter files",
            ("plugin.startup",), vllm=True)

ALL: dict[str, EnvVar] = {v.name: v for v in globals().values() if isinstance(v, EnvVar)}


def is_control(name: str) -> bool:
    """A control variable of this project (never a knob, never warned about as a misspelt one)."""
    return name in ALL


def declared_to_vllm() -> tuple[str, ...]:
    """The control variables the plugin declares in vLLM's variable registry."""
    return tuple(n for n, v in ALL.items() if v.vllm)


_REFERENCE = re.compile(r"\benvvars\.([A-Z][A-Z0-9_]*)\b")


def spell(text: str) -> str:
    """``text`` with each ``envvars.NAME`` reference replaced by the variable's name (``--help`` built from
    docstrings); other text is left as it is."""
    def name(m: "re.Match[str]") -> str:
        var = globals().get(m.group(1))
        return var.name if isinstance(var, EnvVar) else m.group(0)

    return _REFERENCE.sub(name, text)


def state_dir(environ: Optional[Mapping[str, str]] = None) -> Path:
    """Where an installed copy keeps what it writes (the gate ledger): ``$XDG_STATE_HOME/r9k``, else
    ``~/.local/state/r9k``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "r9k"


def cache_dir(environ: Optional[Mapping[str, str]] = None) -> Path:
    """The cache directory: ``R9K_CACHE_DIR``, else ``$XDG_CACHE_HOME/r9k``, else ``~/.cache/r9k``."""
    env = os.environ if environ is None else environ
    own = CACHE_DIR.get(env)
    if own:
        return Path(own).expanduser()
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "r9k"
