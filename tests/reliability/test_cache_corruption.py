"""Class "cache corruption": the parse cache (registry/loader.py) is an optimisation only. An entry is used only for the exact bytes it was made from
(content hash, not mtime and size); a truncated, bit-flipped, foreign-version, garbage, empty, folder, FIFO
or unwritable cache is ignored and rebuilt, and the results never change."""
from __future__ import annotations

import os
import shutil

import pytest

from r9k.registry import envvars
from r9k.registry.loader import _ParseCache, _stamp, load_registry

from .harness import REPO


@pytest.fixture
def reg_copy(tmp_path, monkeypatch):
    root = tmp_path / "registry"
    shutil.copytree(REPO / "registry", root, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    monkeypatch.setenv(envvars.CACHE_DIR.name, str(tmp_path / "cache"))
    return root


def _values(root):
    reg = load_registry(root, [])
    return {vid: (v.knob, v.stock, repr(v.defaults)) for vid, v in reg.variants.items()}


def _variant_file(root):
    return sorted((root / "variants").glob("*.toml"))[0]


def test_same_size_same_mtime_edit_is_seen(reg_copy):
    """``cp -p`` / ``rsync -a``: new bytes with the old size and mtime; the old parse is not served."""
    _values(reg_copy)  # fills the cache
    f = _variant_file(reg_copy)
    text = f.read_text()
    st = os.stat(f)
    i = text.index('summary = "') + len('summary = "')
    new = text[:i] + ("Z" if text[i] != "Z" else "Y") + text[i + 1:]
    assert len(new.encode()) == len(text.encode())
    f.write_text(new)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    reg = load_registry(reg_copy, [])
    descriptions = [v.summary for v in reg.variants.values()]
    assert any(d.startswith(new[i]) for d in descriptions)


def _cache_file(tmp_path):
    return tmp_path / "cache" / "toml-cache.pickle"


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty", "version", "pickle-only"])
def test_damaged_parse_cache_is_ignored_and_rebuilt(reg_copy, tmp_path, damage):
    want = _values(reg_copy)
    path = _cache_file(tmp_path)
    raw = bytearray(path.read_bytes())
    if damage == "flip":  # one flipped byte deep in the pickle: a value could change silently
        raw[len(raw) * 3 // 4] ^= 0x01
    elif damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "garbage":
        raw = bytearray(os.urandom(4096))
    elif damage == "empty":
        raw = bytearray()
    elif damage == "version":  # written by another version of this project
        raw = raw.replace(_stamp(), b"0" * len(_stamp()), 1)
    elif damage == "pickle-only":  # the old format: a bare pickle
        import pickle

        raw = bytearray(pickle.dumps({"x": (1, 2, 3)}))
    path.write_bytes(bytes(raw))
    assert _ParseCache().data == {}
    assert _values(reg_copy) == want
    assert _ParseCache().data  # rebuilt


@pytest.mark.parametrize("kind", ["folder", "fifo", "unwritable"])
def test_odd_parse_cache_paths_only_cost_speed(reg_copy, tmp_path, kind):
    want = _values(reg_copy)
    path = _cache_file(tmp_path)
    path.unlink()
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.parent.chmod(0o555)
    try:
        assert _values(reg_copy) == want
    finally:
        path.parent.chmod(0o755)


def test_cache_entry_keyed_by_content(reg_copy, tmp_path):
    """A cache entry whose parsed data was altered (written with a valid stamp and checksum, as a bug or
    another tool could) is still not used for a file whose bytes differ from the entry's hash."""
    _values(reg_copy)
    c = _ParseCache()
    f = str(_variant_file(reg_copy))
    digest, data, heads = c.data[f]
    c.data[f] = ("0" * 64, {"variant": []}, heads)
    c.dirty = True
    c.save()
    reg = load_registry(reg_copy, [])
    assert any(v.knob for v in reg.variants.values())
    assert len(reg.variants) == len(_values(reg_copy))
