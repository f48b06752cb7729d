"""The gate closure cache (registry/gatedeps.py, issue 24 item 7): a cached closure is reused only while every file
it covers has the recorded content (never judged by modification times), and the cache file is only a cache: a
damaged one is computed again, a FIFO or a link out of the cache folder at its path is neither read nor written
through, and nothing outside is changed."""
from __future__ import annotations

import json
import os
import threading

import pytest

from r9k.registry import envvars, gatedeps, load_registry
from r9k.registry import ledger as L

from evidence.test_provenance import repo  # noqa: F401 - the fixture (a copy of the registry and test-only gates)

OLD = 1_600_000_000_000_000_000  # 2020-09-13, in ns: far from "now", so no same-tick check can hide an edit


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(envvars.CACHE_DIR.name, str(tmp_path / "cache"))
    monkeypatch.delenv(envvars.NO_CACHE.name, raising=False)
    _cold(monkeypatch)
    return tmp_path / "cache" / f"gatedeps-{gatedeps._CACHE_FORMAT}.json"


def _cold(monkeypatch):
    """What a new process has: nothing in memory, only the cache file."""
    monkeypatch.setattr(gatedeps, "_disk", None)
    gatedeps._direct.cache_clear()
    gatedeps.fresh_lookups()


def _deps(variant="evdep_add"):
    """(source hash, files) of a gate as a new pass computes them (through the cache)."""
    reg = load_registry()
    gatedeps.fresh_lookups()
    files, missing = L.file_hashes(reg, reg.variants[variant])
    return L.hash_of(files, missing), files


def _uncached(monkeypatch, variant="evdep_add"):
    _cold(monkeypatch)
    monkeypatch.setenv(envvars.NO_CACHE.name, "1")
    try:
        return _deps(variant)
    finally:
        monkeypatch.delenv(envvars.NO_CACHE.name)
        _cold(monkeypatch)


def test_a_same_size_edit_with_the_old_mtime_stales_the_gate_at_once(repo, cache, monkeypatch):  # noqa: F811
    """The edit keeps the file's size and modification time (``cp -p``, ``rsync -a``, a clock set back): the
    cached closure must still not be reused, because the content differs."""
    common = repo / "evlib/common.py"
    for p in [common, common.parent]:
        os.utime(p, ns=(OLD, OLD))
    before, files = _deps()
    assert "evlib/common.py" in files and cache.is_file()
    _cold(monkeypatch)
    assert _deps()[0] == before  # reused from the cache: the same answer

    text = common.read_text()
    edited = text.replace("x + y", "y + x")
    assert len(edited) == len(text) and edited != text
    common.write_text(edited)
    os.utime(common, ns=(OLD, OLD))
    os.utime(common.parent, ns=(OLD, OLD))
    _cold(monkeypatch)
    after, files2 = _deps()
    assert after != before and L.file_changes(files, files2) == ["evlib/common.py changed"]
    assert (after, files2) == _uncached(monkeypatch)


def test_a_damaged_cache_is_computed_again(repo, cache, monkeypatch):  # noqa: F811
    want = _uncached(monkeypatch)
    assert _deps() == want
    good = json.loads(cache.read_text())
    closures = [k for k in good if k.startswith("closure:")]
    parses = [k for k in good if not k.startswith("closure:")]
    assert closures and parses

    damaged = [
        good | {k: {"files": {"evlib/common.py": [1, 2, "x"]}, "dirs": [], "missing": 3} for k in closures},
        good | {k: "not an entry" for k in closures + parses},
        good | {k: {"imports": [[0, 5, "y"]], "consts": [1], "script": "no"} for k in parses},
        # well-formed, but recorded for other contents: a file's sha and a folder's listing that are not now
        good | {k: dict(good[k], files={f: "0" * 64 for f in good[k]["files"]}) for k in closures},
        good | {k: dict(good[k], dirs={d: "0" * 64 for d in good[k]["dirs"]}) for k in closures},
        # a path out of the repository is never followed
        good | {k: dict(good[k], files={"../../etc/passwd": "0" * 64}) for k in closures},
    ]
    for bad in damaged:
        cache.write_text(json.dumps(bad))
        _cold(monkeypatch)
        assert _deps() == want
    for raw in [cache.read_bytes()[: len(cache.read_bytes()) // 2], b"\xff\xfe garbage", b"[1, 2]", b""]:
        cache.write_bytes(raw)
        _cold(monkeypatch)
        assert _deps() == want
        assert json.loads(cache.read_text())  # written again, whole


def _poisoned(want_files):
    """A cache that, if trusted, would drop evlib/common.py from the closure: every parse says 'no imports'."""
    return {gatedeps.content_hash(p)[0]: {"imports": [], "consts": [], "script": False}
            for p in want_files}


def test_a_link_out_of_the_cache_folder_is_not_read_nor_written(repo, cache, tmp_path, monkeypatch):  # noqa: F811
    want = _uncached(monkeypatch)
    outside = tmp_path / "elsewhere.json"
    gatedeps.fresh_lookups()
    outside.write_text(json.dumps(_poisoned([repo / f for f in want[1]])))
    before = outside.read_bytes()
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.symlink_to(outside)
    _cold(monkeypatch)
    assert _deps() == want  # the poisoned entries were not used
    assert cache.is_symlink() and outside.read_bytes() == before  # nothing written through the link


def test_a_fifo_at_the_cache_path_is_left_alone(repo, cache, monkeypatch):  # noqa: F811
    want = _uncached(monkeypatch)
    cache.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(cache)
    got = []
    t = threading.Thread(target=lambda: got.append(_deps()), daemon=True)
    t.start()
    t.join(120)  # a reader that opened the FIFO would wait for a writer forever
    assert not t.is_alive(), "reading the cache blocked on a FIFO"
    assert got == [want]
    assert cache.is_fifo()  # not replaced, not written
