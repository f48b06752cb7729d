"""Class "cache corruption": the parse cache (registry/loader.py) and the plugin's registry snapshots
(plugin/regcache.py) are an optimisation only. An entry is used only for the exact bytes it was made from
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


# ------------------------------------------------------------------------------- the plugin's snapshots


def _snapshots(tmp_path):
    return sorted((tmp_path / "cache" / "registry-snapshots").glob("*.pickle"))


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty", "folder", "fifo", "foreign"])
def test_plugin_snapshot_damage_never_stops_a_start(reg_copy, tmp_path, damage):
    from r9k.plugin import regcache

    first = regcache.load_registry_cached(reg_copy, [])
    (snap,) = _snapshots(tmp_path)
    raw = bytearray(snap.read_bytes())
    snap.unlink()
    if damage == "flip":
        raw[len(raw) // 2] ^= 0x10
        snap.write_bytes(bytes(raw))
    elif damage == "truncate":
        snap.write_bytes(bytes(raw[:100]))
    elif damage == "garbage":
        snap.write_bytes(os.urandom(len(raw)))
    elif damage == "empty":
        snap.write_bytes(b"")
    elif damage == "folder":
        snap.mkdir()
    elif damage == "fifo":
        os.mkfifo(snap)
    elif damage == "foreign":  # a bare pickle of something else (an older format or another program)
        import pickle

        snap.write_bytes(pickle.dumps({"not": "a registry"}))
    again = regcache.load_registry_cached(reg_copy, [])
    assert sorted(again.variants) == sorted(first.variants)
    assert {k: v.stock for k, v in again.variants.items()} == {k: v.stock for k, v in first.variants.items()}


def test_plugin_snapshot_follows_a_same_size_same_mtime_edit(reg_copy, tmp_path):
    from r9k.plugin import regcache

    regcache.load_registry_cached(reg_copy, [])
    f = _variant_file(reg_copy)
    text, st = f.read_text(), os.stat(f)
    i = text.index('summary = "') + len('summary = "')
    ch = "Z" if text[i] != "Z" else "Y"
    f.write_text(text[:i] + ch + text[i + 1:])
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    reg = regcache.load_registry_cached(reg_copy, [])
    assert any(v.summary.startswith(ch) for v in reg.variants.values())


def test_plugin_snapshot_in_an_unusable_cache_folder(reg_copy, tmp_path, monkeypatch):
    from r9k.plugin import regcache

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv(envvars.CACHE_DIR.name, str(blocker))
    reg = regcache.load_registry_cached(reg_copy, [])
    assert reg.variants
