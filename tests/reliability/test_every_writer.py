"""Class "targets", over every writer: each place the project writes a file refuses a symlink that leads out
of its folder, a FIFO, a folder and a device node at its path, with one located line (or, for a cache or the
plugin, a skipped or logged write), and leaves that node and whatever a link points to exactly as they were.

The list of writers is checked to be complete: an AST scan (writescan.py) of registry/, plugin/, r9kctl/ and
scripts/ finds every call that writes a file; each is either driven here (DRIVEN), reaches the one writer
through an entry point driven here with the same arguments (THROUGH), or is one of the few raw writes that
never touch a path a user names (RAW, each with why)."""
from __future__ import annotations

import errno
import os
import stat
import types
from pathlib import Path

import pytest

from r9k.registry import envvars, fileio

from .harness import ERROR_LINE, run_main
from .writescan import scan

PRECIOUS = "precious: not this writer's file\n"

# --------------------------------------------------------------------------------------------- the targets


def _outside_link(path: Path, tmp: Path):
    outside = tmp / "elsewhere"
    outside.mkdir(exist_ok=True)
    victim = outside / "victim.txt"
    victim.write_text(PRECIOUS)
    path.symlink_to(victim)
    return lambda: os.path.islink(path) and os.readlink(path) == str(victim) and victim.read_text() == PRECIOUS


def _fifo(path: Path, tmp: Path):
    os.mkfifo(path)
    return lambda: stat.S_ISFIFO(os.lstat(path).st_mode)


def _folder(path: Path, tmp: Path):
    path.mkdir()
    (path / "inside.txt").write_text(PRECIOUS)
    return lambda: path.is_dir() and (path / "inside.txt").read_text() == PRECIOUS


def _device(path: Path, tmp: Path):
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            pytest.skip("cannot make a device node here (not root)")
        raise
    return lambda: stat.S_ISCHR(os.lstat(path).st_mode)


KINDS = {"link-out-of-folder": _outside_link, "fifo": _fifo, "folder": _folder, "device": _device}

# --------------------------------------------------------------------------------------------- the writers
# Each takes (the path it must write: the test puts the target there first, tmp folder, monkeypatch) and
# returns "raised" (a located error reached the caller) or "skipped" (a cache or the plugin went on).


def _raises(call) -> str:
    with pytest.raises(fileio.FileError) as ei:
        call()
    d = ei.value.diagnostic
    assert d.code in ("not-a-file", "is-directory") and d.file, d.format()
    assert isinstance(ei.value, OSError)  # callers that handle write failures handle refusals alike
    return "raised"


def _ledger(path, tmp, mp):
    from r9k.registry import ledger

    rec = types.SimpleNamespace(to_json=lambda: {"gate": "x"})  # what append_records asks of a record
    return _raises(lambda: ledger.append_records(path, [rec]))


def _quality(path, tmp, mp):
    from r9k.r9kctl.evidence import quality

    return _raises(lambda: quality.append_quality_record(path, {"config": "x", "eval": "sanity"}))


def _results(path, tmp, mp):
    from r9k.r9kctl.evidence import results

    return _raises(lambda: results.dump(path, {"x": 1}, []))


def _profile(path, tmp, mp):
    from r9k.registry import profile_io

    return _raises(lambda: profile_io.atomic_write(path, "name = 'x'\n"))


def _schema(path, tmp, mp):
    code, out, err = run_main(["schema", "profile", "--out", str(path)])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and ERROR_LINE.match(lines[0]), (code, err)
    assert "Traceback" not in out + err
    return "raised"


def _status_section(path, tmp, mp):
    from r9k.plugin import report

    sec = {"profile": "p", "hash": "h", "tp": 1, "model": None, "server": "s", "process": {"name": "main"}}
    return _raises(lambda: report.write_section(str(path), sec))


def _status_counters(path, tmp, mp):
    from r9k.plugin import report

    base = path.parent / "server-s.status.json"
    assert report.counters_path(str(base), "main") == path
    return _raises(lambda: report.write_counters(str(base), "main", {}))


def _hand_on(path, tmp, mp):
    from r9k.plugin import startup

    active = types.SimpleNamespace(hash="abc", rs=types.SimpleNamespace(to_dict=lambda: {}))
    environ = {envvars.CACHE_DIR.name: str(tmp / "cache")}
    want = tmp / "cache" / "run" / f"manifest-abc-{os.getpid()}.json"
    assert want == path
    assert startup.hand_on(active, environ) is None  # not handed on: the next processes resolve themselves
    assert envvars.MANIFEST.name not in environ
    return "skipped"


def _gatedeps_cache(path, tmp, mp):
    from r9k.registry import gatedeps

    mp.setenv(envvars.CACHE_DIR.name, str(path.parent))
    mp.delenv(envvars.NO_CACHE.name, raising=False)
    assert gatedeps._cache_path() == path
    mp.setattr(gatedeps, "_disk", {"k": {}})
    mp.setattr(gatedeps, "_dirty", True)
    gatedeps.save_cache()
    assert gatedeps._dirty  # not written
    return "skipped"


def _parse_cache(path, tmp, mp):
    from r9k.registry import loader

    mp.setenv(envvars.CACHE_DIR.name, str(path.parent))
    mp.delenv(envvars.NO_CACHE.name, raising=False)
    cache = loader._ParseCache()
    assert cache.path == path
    cache.data = {}
    cache.dirty = True
    cache.save()
    return "skipped"


def _tui_server_log(path, tmp, mp):
    from r9k.r9kctl.tui import server

    plan = types.SimpleNamespace(argv=["/bin/false"], display=lambda: "vllm serve x", env={})
    mp.setattr("r9k.r9kctl.launch.process_env", lambda plan: {})
    srv = server.Server("http://127.0.0.1:1", plan=plan, log_path=path)
    out = _raises(srv._spawn)
    assert srv.proc is None  # nothing started without its log
    return out


def _bisect_result(path, tmp, mp):
    partial = tmp / "step.partial"  # (beside it in bisect; here out of the folder the test lists)
    partial.write_text("{}\n")
    out = _raises(lambda: fileio.move_into_place(partial, path, "result file"))
    assert partial.read_text() == "{}\n"  # the finished file stays where it was
    return out


def _stream(path, tmp, mp):
    return _raises(lambda: fileio.open_for_writing(path, what="log file"))


def _stream_append(path, tmp, mp):
    return _raises(lambda: fileio.open_for_writing(path, append=True, what="event file"))


def _atomic(path, tmp, mp):
    return _raises(lambda: fileio.atomic_write(path, "new\n", "output file"))


def _update(path, tmp, mp):
    return _raises(lambda: fileio.update(path, lambda old: "new\n", "file"))


#: writer -> (where the target goes, relative to the test's tmp folder, the driver)
WRITERS = {
    "fileio.atomic_write": ("out/x.json", _atomic),
    "fileio.update": ("out/x.json", _update),
    "fileio.open_for_writing": ("out/x.log", _stream),
    "fileio.open_for_writing(append)": ("out/x.log", _stream_append),
    "fileio.move_into_place": ("out/step.jsonl", _bisect_result),
    "ledger.append_records": ("gates/ledger.jsonl", _ledger),
    "quality.append_quality_record": ("rel/1.0.toml", _quality),
    "results.dump": ("out/answers.jsonl", _results),
    "profile_io.atomic_write": ("profiles/p.toml", _profile),
    "schema --out": ("out/schema.json", _schema),
    "report.write_section": ("cache/run/server-s.status.json", _status_section),
    "report.write_counters": ("cache/run/server-s.status.json.main.counters.json", _status_counters),
    "startup.hand_on": (f"cache/run/manifest-abc-{os.getpid()}.json", _hand_on),
    "gatedeps.save_cache": ("cache/gatedeps-1.json", _gatedeps_cache),
    "loader parse cache": ("cache/toml-cache.pickle", _parse_cache),
    "tui server log": ("logs/server.log", _tui_server_log),
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("writer", list(WRITERS))
def test_writer_leaves_a_target_that_is_not_its_file_alone(writer, kind, tmp_path, monkeypatch):
    rel, drive = WRITERS[writer]
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    intact = KINDS[kind](path, tmp_path)
    before = sorted(os.listdir(path.parent))
    drive(path, tmp_path, monkeypatch)
    assert intact(), f"{writer} replaced or wrote through the {kind} at its path"
    assert sorted(os.listdir(path.parent)) == before  # no temporary file left beside it


def test_a_link_within_its_folder_is_still_written_through(tmp_path):
    real = tmp_path / "run-3.json"
    real.write_text("old\n")
    link = tmp_path / "latest.json"
    link.symlink_to(real.name)
    fileio.atomic_write(link, "new\n")
    assert os.path.islink(link) and real.read_text() == "new\n"


# --------------------------------------------------------------------------------------------- completeness

#: Write calls that reach the one writer through an entry point driven above, with the same arguments.
THROUGH = {
    ("registry/ledger.py", "ledger_path", "fileio.atomic_write"): "fileio.atomic_write (first copy of the ledger)",
    ("registry/profile_io.py", "atomic_write", "fileio.atomic_write"): "profile_io.atomic_write",
    ("registry/ledger.py", "append_records", "fileio.atomic_append"): "ledger.append_records",
    ("registry/ledger.py", "append_records", "fileio.move_into_place"): "ledger.append_records (a full segment moved "
                                                                        "aside: tests/evidence/test_records.py)",
    ("registry/loader.py", "_ParseCache.save", "fileio.atomic_write"): "loader parse cache",
    ("registry/gatedeps.py", "save_cache", "fileio.atomic_write"): "gatedeps.save_cache",
    ("plugin/startup.py", "hand_on", "fileio.atomic_write"): "startup.hand_on",
    ("plugin/report.py", "write_section", "fileio.atomic_write"): "report.write_section",
    ("plugin/report.py", "write_counters", "fileio.atomic_write"): "report.write_counters",
    ("plugin/report.py", "write_cluster", "fileio.atomic_write"): "fileio.atomic_write (rank 0's cluster file)",
    ("plugin/models/tiny_flash_next.py", "to_block_fp8", "fileio.atomic_write"): "fileio.atomic_write",
    ("r9kctl/cmd_schema.py", "run", "fileio.atomic_write"): "schema --out",
    ("r9kctl/cmd_bench.py", "run", "fileio.atomic_write"): "fileio.atomic_write (--export-plan)",
    ("r9kctl/cmd_bench.py", "_serve", "fileio.atomic_write"): "fileio.atomic_write (summary.json)",
    ("r9kctl/decode_step/run.py", "run_plan.save", "fileio.atomic_write"): "fileio.atomic_write (--out)",
    ("r9kctl/cmd_launch.py", "run", "fileio.atomic_write"): "fileio.atomic_write (--vllm-config files)",
    ("r9kctl/launch.py", "plan_launch", "fileio.atomic_write"): "fileio.atomic_write (the launch manifest)",
    ("r9kctl/launch.py", "LaunchPlan.write_env_file", "fileio.atomic_write"): "fileio.atomic_write (the manifest's .env file)",
    ("r9kctl/evidence/bisect.py", "write_plan", "fileio.atomic_write"): "fileio.atomic_write",
    ("r9kctl/evidence/bisect.py", "run_end_to_end", "fileio.open_for_writing"): "fileio.open_for_writing",
    ("r9kctl/evidence/bisect.py", "run_end_to_end", "fileio.move_into_place"): "fileio.move_into_place",
    ("r9kctl/evidence/gate.py", "run", "fileio.open_for_writing"): "fileio.open_for_writing",
    ("r9kctl/evidence/pytest_plugin.py", "_emit", "fileio.open_for_writing"): "fileio.open_for_writing(append)",
    ("r9kctl/evidence/quality.py", "append_quality_record", "fileio.atomic_write"): "quality.append_quality_record",
    ("r9kctl/evidence/record.py", "_resume_state", "fileio.atomic_write"): "fileio.atomic_write",
    ("r9kctl/evidence/record.py", "record", "fileio.open_for_writing"): "fileio.open_for_writing(append)",
    ("r9kctl/evidence/results.py", "dump", "fileio.atomic_write"): "results.dump",
    ("r9kctl/evidence/serve_bench.py", "run", "fileio.open_for_writing"): "fileio.open_for_writing",
    ("r9kctl/evidence/serve_bench.py", "start", "fileio.open_for_writing"): "fileio.open_for_writing",
    ("r9kctl/tui/session.py", "write_recovery", "fileio.atomic_write"): "profile_io.atomic_write",
    ("r9kctl/tui/server.py", "Server._spawn", "fileio.open_for_writing"): "tui server log",
    ("scripts/vllm_interface.py", "main", "fileio.atomic_write"): "fileio.atomic_write",
}

_TMP = "writes only inside a folder it has just made itself (tempfile), never a path anyone names"
#: Raw writes (not through the one writer), each with why it cannot replace what is not its own.
_DEVICE = ("a device-machine script (the GPU image's Python, no package): writes only into the run's --out "
           "folder, the device call's fresh $OUT")
RAW = {
    ("registry/profile_io.py", "save_as", "tempfile.mkstemp"): "a new temporary file (O_EXCL) in the folder",
    ("registry/profile_io.py", "save_as", "os.fdopen"): "writes that new temporary file",
    ("registry/profile_io.py", "save_as", "os.link"): "create-exclusive: fails when anything is at the name",
    ("registry/provenance.py", "main", ".write_text"):
        "runs alone (python -S -I), no package: its own checks (test_provenance_out_is_checked_alike)",
    ("registry/provenance.py", "main", "os.replace"): "the same script's rename, after those checks",
    ("plugin/tiny_model.py", "ensure_tiny_model", "tempfile.mkdtemp"): _TMP,
    ("plugin/tiny_model.py", "ensure_tiny_model", ".rename"): "renames its new folder onto a name with nothing there",
    ("plugin/tiny_model.py", "build", ".write_text"): _TMP,
    ("plugin/tiny_model.py", "build_qwen2_moe", ".write_text"): _TMP,
    ("plugin/tiny_model.py", "_write_tokenizer", ".write_text"): _TMP,
    ("r9kctl/evidence/dataset.py", "run_humaneval", "tempfile.TemporaryDirectory"): _TMP,
    ("r9kctl/evidence/dataset.py", "run_humaneval", ".write_text"): _TMP,
    ("r9kctl/evidence/gate.py", "run", "tempfile.TemporaryDirectory"): _TMP,
    ("r9kctl/evidence/junit.py", "collect", "tempfile.TemporaryDirectory"): _TMP,
    ("plugin/startup.py", "claim_server_id", "os.open"):
        "create-exclusive (O_CREAT | O_EXCL: fails on anything at the name, a link included) in the cache's run/",
    ("plugin/startup.py", "claim_server_id", "os.fdopen"): "writes that new claim file",
    **{("scripts/gpu_serve.py", f, k): _DEVICE for f, k in [
        ("launch", ".open"), ("main", ".write_text"), ("main.save", ".write_text"), ("main.status", ".write_text")]},
    ("scripts/gpu_serve.py", "broken_kernel", "tempfile.mkdtemp"): _TMP,
    ("scripts/gpu_serve.py", "broken_kernel", ".write_text"): _TMP,
    ("scripts/gpu_serve.py", "for_this_card", "tempfile.mkdtemp"): _TMP,
    ("scripts/gpu_serve.py", "for_this_card", ".write_text"): _TMP,
    ("scripts/gpu_predict.py", "main", "open"): _DEVICE,
    ("scripts/gpu_predict.py", "main", "json.dump"): _DEVICE,
    ("r9kctl/evidence/bisect.py", "set_aside_results", ".rename"):
        "moves its own results folder to a results.oldN name it checked is free",
}


def test_every_write_call_is_a_listed_writer():
    found = set(scan())
    unlisted = sorted(found - set(THROUGH) - set(RAW))
    assert not unlisted, f"write calls that no test covers (add them to WRITERS/THROUGH, or RAW with why): {unlisted}"
    stale = sorted((set(THROUGH) | set(RAW)) - found)
    assert not stale, f"listed writers the scan no longer finds: {stale}"
    assert all(v.split(" (")[0].split(" with ")[0] in WRITERS for v in THROUGH.values()), \
        [v for v in THROUGH.values() if v.split(" (")[0].split(" with ")[0] not in WRITERS]


def test_the_scan_sees_a_raw_write(tmp_path, monkeypatch):
    """The scan itself: a new raw writer would be found (it is not blind to the forms used above)."""
    import ast

    from . import writescan

    src = ("import os, json\nfrom pathlib import Path\n"
           "def f(p):\n    Path(p).write_text('x')\n    open(p, 'a').write('x')\n    json.dump({}, open(p, 'w'))\n"
           "    os.replace(p, p)\n    Path(p).open('w')\n    os.open(p, os.O_WRONLY)\n")
    kinds = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Call):
            k = writescan._kind(node, set())
            if k:
                kinds.add(k)
    assert kinds == {".write_text", "open", "json.dump", "os.replace", ".open", "os.open"}


@pytest.mark.parametrize("kind", list(KINDS))
def test_provenance_out_is_checked_alike(kind, tmp_path):
    import subprocess
    import sys

    from .harness import REPO

    path = tmp_path / "out" / "provenance.json"
    path.parent.mkdir()
    intact = KINDS[kind](path, tmp_path)
    r = subprocess.run([sys.executable, "-S", "-I", str(REPO / "registry" / "provenance.py"), "--out", str(path),
                        "--root", str(tmp_path / "out"), "--no-torch"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "error[not-a-file]" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert intact()
