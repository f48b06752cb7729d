"""Corpus, part 4: writers never lose data. Every failure of a write (disk full, a failing fsync or rename,
Ctrl-C, a kill) leaves the old file as it was and no temporary file behind (a killed writer's is removed by
the next write); a write through a symlink updates its target; commands that would replace a result refuse."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from r9k.registry import fileio

from .harness import REPO, run_main
from .test_commands import RESULT

OLD = "old content\n" * 100


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, "No space left on device")


def _leftovers(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(".tmp"))


FAILURES = {
    "disk-full-on-write": ("_write_all", _enospc),
    "disk-full-on-fsync": ("os.fsync", _enospc),
    "rename-refused": ("os.replace", lambda *a: (_ for _ in ()).throw(OSError(errno.EACCES, "Permission denied"))),
    "read-only-fs": ("os.replace", lambda *a: (_ for _ in ()).throw(OSError(errno.EROFS, "Read-only file system"))),
    "chmod-fails": ("os.fchmod", _enospc),
}


def _patch(monkeypatch, where: str, fn):
    if where.startswith("os."):
        monkeypatch.setattr(fileio.os, where[3:], fn)
    else:
        monkeypatch.setattr(fileio, where, fn)


@pytest.mark.parametrize("failure", sorted(FAILURES))
@pytest.mark.parametrize("through_link", [False, True], ids=["file", "symlink"])
def test_atomic_write_failure_keeps_the_old_file(tmp_path, monkeypatch, failure, through_link):
    target = tmp_path / "data.toml"
    target.write_text(OLD)
    path = target
    if through_link:
        path = tmp_path / "link.toml"
        os.symlink(target.name, path)
    _patch(monkeypatch, *FAILURES[failure])
    with pytest.raises(fileio.WriteError) as ei:
        fileio.atomic_write(path, "new content\n")
    assert isinstance(ei.value, OSError)  # callers that handle write failures as OSError still do
    line = ei.value.diagnostic.format()
    assert "error[write]" in line and "unchanged" in line and path.name in line
    assert target.read_text() == OLD
    assert _leftovers(tmp_path) == []
    assert os.path.islink(path) == through_link


def test_ctrl_c_during_write_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "data.toml"
    target.write_text(OLD)

    def interrupt(*_a):
        raise KeyboardInterrupt
    monkeypatch.setattr(fileio.os, "fsync", interrupt)
    with pytest.raises(KeyboardInterrupt):
        fileio.atomic_write(target, "new\n")
    assert target.read_text() == OLD and _leftovers(tmp_path) == []


def test_write_through_a_symlink_updates_its_target(tmp_path):
    target = tmp_path / "real" / "profile.toml"
    target.parent.mkdir()
    target.write_text(OLD)
    os.chmod(target, 0o640)
    link = tmp_path / "profile.toml"
    os.symlink(target, link)
    written = fileio.atomic_write(link, "new\n")
    assert written == target.resolve()
    assert os.path.islink(link) and target.read_text() == "new\n"
    assert oct(os.stat(target).st_mode & 0o777) == oct(0o640)  # the permission bits are kept
    assert _leftovers(tmp_path) == [] and _leftovers(target.parent) == []


def test_write_to_a_symlink_loop_is_one_located_error(tmp_path):
    loop = tmp_path / "loop.toml"
    os.symlink(loop.name, loop)
    with pytest.raises(fileio.FileError) as ei:
        fileio.atomic_write(loop, "x")
    assert ei.value.kind == "symlink-loop"


def test_a_killed_save_leaves_the_old_file_and_the_next_save_cleans_up(tmp_path):
    target = tmp_path / "release.toml"
    target.write_text(OLD)
    script = f"""
import os, signal
from r9k.registry import fileio
real = os.fsync
def die(fd):
    os.kill(os.getpid(), signal.SIGKILL)  # killed between writing the temporary file and the rename
os.fsync = die
fileio.atomic_write({str(target)!r}, "half-written" * 1000)
"""
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert p.returncode == -signal.SIGKILL
    assert target.read_text() == OLD  # the rename never happened
    assert len(_leftovers(tmp_path)) == 1  # the dead writer's temporary file...
    fileio.atomic_write(target, "next\n")
    assert _leftovers(tmp_path) == []  # ...is removed by the next write to the same file
    assert target.read_text() == "next\n"


def test_a_live_writers_temporary_file_is_left_alone(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text(OLD)
    other = tmp_path / f".f.txt.{os.getppid()}.abc.tmp"  # the pid of a live process (our parent)
    other.write_text("in progress")
    fileio.atomic_write(target, "x")
    assert other.exists()


@pytest.mark.parametrize("failure", ["disk-full-on-write", "disk-full-on-fsync"])
def test_append_failure_keeps_the_ledger(tmp_path, monkeypatch, failure):
    from r9k.registry import ledger as L

    path = tmp_path / "ledger.jsonl"
    path.write_text('{"variant": "x"}\n')
    _patch(monkeypatch, *FAILURES[failure])
    rec = L.GateRecord("router_gemm", ["t"], "pass", {"t": "passed"}, "cpu", "2026-01-01T00:00:00Z", "h", 1)
    with pytest.raises(OSError):
        L.append_records(path, [rec])
    assert path.read_text() == '{"variant": "x"}\n' and _leftovers(tmp_path) == []


def test_append_adds_a_missing_newline_and_keeps_earlier_lines(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_text('{"a": 1}')
    fileio.atomic_append(path, '{"b": 2}\n')
    assert path.read_text() == '{"a": 1}\n{"b": 2}\n'


def _results(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(RESULT)
    b.write_text(RESULT)
    return a, b


@pytest.mark.parametrize("failure", ["disk-full-on-write", "disk-full-on-fsync", "rename-refused"])
def test_eval_compare_into_keeps_the_release_on_any_failure(tmp_path, monkeypatch, failure):
    release = tmp_path / "v0.3.2.toml"
    release.write_text((REPO / "registry/releases/v0.3.2.toml").read_text())
    before = release.read_bytes()
    a, b = _results(tmp_path)
    _patch(monkeypatch, *FAILURES[failure])
    code, out, err = run_main(["eval", "compare", str(a), str(b), "--into", str(release), "--config", "fn_tp4"])
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if "error[" in ln]
    assert len(lines) == 1 and "v0.3.2.toml" in lines[0] and "error[write]" in lines[0], err
    assert "Traceback" not in out + err
    assert release.read_bytes() == before and _leftovers(tmp_path) == []


def test_eval_compare_into_appends_once_when_it_works(tmp_path):
    release = tmp_path / "v0.3.2.toml"
    release.write_text((REPO / "registry/releases/v0.3.2.toml").read_text())
    a, b = _results(tmp_path)
    code, out, err = run_main(["eval", "compare", str(a), str(b), "--into", str(release), "--config", "fn_tp4"])
    assert code == 0, err
    assert release.read_text().count("[[quality]]") == (REPO / "registry/releases/v0.3.2.toml").read_text().count(
        "[[quality]]") + 1
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("failure", ["disk-full-on-write", "rename-refused"])
def test_profile_save_failure_keeps_the_profile(tmp_path, monkeypatch, failure):
    from r9k.registry.profile_io import ProfileDocument

    path = tmp_path / "mine.toml"
    path.write_text('# my notes\nextends = "tp4-default"\n\n[knobs]\nR9K_ROUTER = "r9k"\n')
    before = path.read_bytes()
    doc = ProfileDocument.load(path)
    doc.set_knob("R9K_ROUTER", "stock")
    _patch(monkeypatch, *FAILURES[failure])
    with pytest.raises(OSError):
        doc.save()
    assert path.read_bytes() == before and _leftovers(tmp_path) == []


def test_profile_save_through_a_symlink_updates_the_target(tmp_path):
    from r9k.registry.profile_io import ProfileDocument

    real = tmp_path / "store" / "mine.toml"
    real.parent.mkdir()
    real.write_text('extends = "tp4-default"\n\n[knobs]\nR9K_ROUTER = "r9k"\n')
    link = tmp_path / "mine.toml"
    os.symlink(real, link)
    doc = ProfileDocument.load(link)
    doc.set_knob("R9K_ROUTER", "stock")
    doc.save()
    assert os.path.islink(link) and 'R9K_ROUTER = "stock"' in real.read_text()


def test_profile_load_of_latin1_is_a_located_error(tmp_path):
    from r9k.registry.profile_io import ProfileDocument

    path = tmp_path / "mine.toml"
    path.write_bytes(b'description = "caf\xe9"\n')
    with pytest.raises(fileio.FileError) as ei:
        ProfileDocument.load(path)
    assert ei.value.diagnostic.format().endswith("(save it as UTF-8)") and ei.value.diagnostic.line == 1


def test_bisect_plan_refuses_an_existing_plan_without_force(tmp_path):
    d = tmp_path / "bisect"
    argv = ["bisect", "plan", "--good", "stock", "--bad", "round2-numerics", "--dir", str(d)]
    code, out, err = run_main(argv)
    assert code == 0, err
    plan = (d / "plan.json").read_bytes()
    (d / "results").mkdir(exist_ok=True)
    (d / "results" / "p0.jsonl").write_text(RESULT)
    other = ["bisect", "plan", "--good", "stock", "--bad", "tp4-default", "--dir", str(d)]
    code, out, err = run_main(other)
    assert code == 2 and "plan.json" in err and "--force" in err and "1 recorded result" in err, err
    assert "Traceback" not in err
    assert (d / "plan.json").read_bytes() == plan and (d / "results" / "p0.jsonl").read_text() == RESULT
    code, out, err = run_main(other + ["--force"])
    assert code == 0, err
    assert json.loads((d / "plan.json").read_text())["bad"] == "tp4-default"
    assert (d / "results.old" / "p0.jsonl").read_text() == RESULT  # the old plan's results are kept aside
    assert not (d / "results" / "p0.jsonl").exists()


def test_eval_record_refuses_to_overwrite_a_result(tmp_path):
    out = tmp_path / "run.jsonl"
    out.write_text(RESULT)
    code, o, err = run_main(["eval", "record", "--url", "http://127.0.0.1:9", "--dataset", "arith-smoke",
                             "--out", str(out), "--model", "m", "--timeout", "1"])
    assert code == 2 and "--resume" in err and "Traceback" not in err, err
    assert out.read_text() == RESULT


def test_export_plan_disk_full_keeps_the_old_plan(tmp_path, monkeypatch):
    plan = tmp_path / "plan.json"
    plan.write_text('{"old": true}\n')
    _patch(monkeypatch, *FAILURES["disk-full-on-write"])
    code, out, err = run_main(["bench", "decode-step", "--export-plan", str(plan)])
    assert code == 2 and "error[write]" in err and "Traceback" not in err, err
    assert plan.read_text() == '{"old": true}\n' and _leftovers(tmp_path) == []


def test_a_dry_run_with_a_full_cache_is_one_line_and_a_full_env_file_keeps_the_exports_inline(tmp_path, monkeypatch):
    env = {"R9K_CACHE_DIR": str(tmp_path / "cache")}
    _patch(monkeypatch, *FAILURES["disk-full-on-write"])
    code, out, err = run_main(["launch", "-p", "tp4-default", "--dry-run"], env)
    assert code == 2 and out == "" and "Traceback" not in err, err
    (line,) = [ln for ln in err.splitlines() if ": error[" in ln]
    assert "error[write]" in line and "No space left" in line, err
    # the manifest written, the disk full at the env file: the printed command exports every variable itself
    monkeypatch.undo()
    real = fileio.atomic_write

    def full_at_env(path, *a, **k):
        if str(path).endswith(".env"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, *a, **k)

    monkeypatch.setattr(fileio, "atomic_write", full_at_env)
    code, out, err = run_main(["launch", "-p", "tp4-default", "--dry-run"], env)
    assert code == 0 and "Traceback" not in err, err
    assert "set -a;" not in out and "export R9K_AG=1" in out and "exported inline: cannot write" in out, out


def test_eval_record_disk_full_mid_run_names_the_file_and_leaves_whole_lines(tmp_path, monkeypatch):
    """A full disk while answers arrive: one located error line naming the result file and what it keeps,
    exit 2; the file ends at its last whole line (a torn line was left before), and --resume goes on from it."""
    from r9k.r9kctl.evidence import record as R
    from r9k.r9kctl.evidence import results

    monkeypatch.setattr(R.Client, "generate", lambda self, model, prompt, n, api: ("42", {"completion_tokens": 1}))
    monkeypatch.setattr(R, "server_status", lambda base, timeout_s=5.0: None)
    real = fileio.open_for_writing
    writes = {"n": 0}

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def write(self, s):
            writes["n"] += 1
            if writes["n"] == 4:  # the header and 2 answers fit; the 3rd answer's line is torn by a full disk
                self.fh.write(s[: len(s) // 2])
                self.fh.flush()
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.fh.write(s)

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.fh.__exit__(*exc)

    monkeypatch.setattr(fileio, "open_for_writing", lambda *a, **k: Full(real(*a, **k)))
    out = tmp_path / "run.jsonl"
    code, o, err = run_main(["eval", "record", "--url", "http://127.0.0.1:9", "--dataset", "arith-smoke",
                             "--out", str(out), "--model", "m", "--quiet"])
    lines = [ln for ln in err.splitlines() if "error[" in ln]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "run.jsonl" in lines[0] and "error[write]" in lines[0] and "2 answer(s)" in lines[0], lines[0]
    text = out.read_text()
    assert text.endswith("}\n") and len(text.splitlines()) == 3, text  # the header and 2 whole answers
    monkeypatch.setattr(fileio, "open_for_writing", real)
    code, o, err = run_main(["eval", "record", "--url", "http://127.0.0.1:9", "--dataset", "arith-smoke",
                             "--out", str(out), "--model", "m", "--quiet", "--resume"])
    assert code == 0, err
    rf = results.load(out)
    assert rf.n == len(rf.results) and rf.n > 3
