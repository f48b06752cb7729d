"""Class "targets": what a writer may replace. Only regular files are written; a FIFO, socket, device node or
a symlink resolving outside the folder it must stay in is refused with one located line and left as it
was; ``/dev/stdout`` redirected to a file is written to (appended to that stream), never replaced."""
from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys

import pytest

from r9k.registry import fileio

from .harness import run_main


def _refused(path, **kw):
    with pytest.raises(fileio.FileError) as ei:
        fileio.atomic_write(path, "new\n", "output file", **kw)
    d = ei.value.diagnostic
    assert d.code == "not-a-file" and d.file, d.format()
    return d


def test_fifo_is_left_alone(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "a FIFO" in _refused(fifo).message
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["pipe"]  # no temporary file left


def test_socket_is_left_alone(tmp_path):
    path = tmp_path / "s.sock"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(path))
        assert "a socket" in _refused(path).message
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        s.close()


def test_device_node_is_refused_directly_and_through_a_link(tmp_path):
    assert "character device" in _refused("/dev/null").message
    link = tmp_path / "out.json"
    link.symlink_to("/dev/null")
    _refused(link)
    assert os.path.islink(link) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_append_and_update_refuse_what_write_refuses(tmp_path):
    fifo = tmp_path / "ledger.jsonl"
    os.mkfifo(fifo)
    for call in (lambda: fileio.atomic_append(fifo, "x\n"), lambda: fileio.update(fifo, lambda old: "x")):
        with pytest.raises(fileio.FileError) as ei:
            call()
        assert ei.value.kind in ("not-a-file",)
    with pytest.raises(fileio.FileError):
        fileio.open_for_writing(fifo)


def test_symlink_outside_its_folder_is_refused(tmp_path):
    cache, outside = tmp_path / "cache", tmp_path / "precious.txt"
    cache.mkdir()
    outside.write_text("keep me\n")
    (cache / "entry").symlink_to(outside)
    d = _refused(cache / "entry", within=cache)
    assert "outside" in d.message
    assert outside.read_text() == "keep me\n"
    inside = cache / "real"
    inside.write_text("old")
    (cache / "alias").symlink_to(inside)
    fileio.atomic_write(cache / "alias", "new", within=cache)  # a link inside the folder: its target written
    assert inside.read_text() == "new" and os.path.islink(cache / "alias")


def test_dev_stdout_redirected_to_a_file_is_written_not_replaced(tmp_path):
    out = tmp_path / "captured.txt"
    out.write_text("before\n")
    ino = os.stat(out).st_ino
    code = "from r9k.registry import fileio; fileio.atomic_write('/dev/stdout', 'written\\n')"
    with open(out, "a") as fh:
        subprocess.run([sys.executable, "-c", code], stdout=fh, check=True, timeout=300)
    assert out.read_text() == "before\nwritten\n"
    assert os.stat(out).st_ino == ino  # the same file: not renamed over
    assert sorted(os.listdir(tmp_path)) == ["captured.txt"]


def test_dev_stdout_into_a_pipe(tmp_path):
    code = "from r9k.registry import fileio; fileio.atomic_write('/dev/stdout', 'to the pipe\\n')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert r.stdout == "to the pipe\n"


@pytest.mark.parametrize("make", ["fifo", "device"])
def test_command_out_option_refuses_a_non_regular_file(tmp_path, make):
    """A command's --out naming a FIFO or a device: exit 2, one located line, the node unchanged."""
    if make == "fifo":
        target = tmp_path / "schema.json"
        os.mkfifo(target)
    else:
        target = tmp_path / "schema.json"
        target.symlink_to("/dev/null")
    code, out, err = run_main(["schema", "profile", "--out", str(target)])
    assert code == 2, (out, err)
    lines = [ln for ln in err.splitlines() if "error[" in ln]
    assert len(lines) == 1 and "error[not-a-file]" in lines[0] and "schema.json" in lines[0], err
    assert "Traceback" not in err
