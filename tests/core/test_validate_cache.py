"""What makes a cold ``r9kctl validate`` cheap (issue 24 item 7) changes nothing it finds: the validated-item cache
(registry/itemcache.py) rebuilds exactly the items a check gives, never serves an item of other text, and is only a
cache (damaged, a FIFO, a link out: checked again, nothing lost); the toolchain's versions read without
importlib.metadata are importlib.metadata's; a warm run builds no pydantic validator."""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from r9k.registry import envvars, itemcache, load_registry
from r9k.registry import provenance as P
from r9k.registry.errors import RegistryError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(envvars.CACHE_DIR.name, str(tmp_path / "cache"))
    monkeypatch.delenv(envvars.NO_CACHE.name, raising=False)
    return tmp_path / "cache" / f"validated-{itemcache.FORMAT}.json"


def _tree_of(reg):
    """Every item of a registry as its type-exact picture (what == would not tell apart)."""
    return {kind: {k: itemcache._tree(v) for k, v in getattr(reg, kind).items()}
            for kind in ("variants", "releases", "models", "profiles")}


def _uncached(monkeypatch, *a):
    monkeypatch.setenv(envvars.NO_CACHE.name, "1")
    try:
        return load_registry(*a)
    finally:
        monkeypatch.delenv(envvars.NO_CACHE.name)


def _count_checks(monkeypatch):
    """How many items were checked by pydantic (model_validate) rather than rebuilt from the cache."""
    n = [0]
    real = itemcache.ItemCache.check

    def check(self, cls, raw, *a, **k):
        hit = self.items.get(f"{cls.__name__}:{a[0]}:{a[1] if len(a) > 1 else k.get('index', 0)}:"
                             f"{a[2] if len(a) > 2 else k.get('stem', '')}")
        n[0] += hit is None
        return real(self, cls, raw, *a, **k)

    monkeypatch.setattr(itemcache.ItemCache, "check", check)
    return n


def test_a_rebuilt_registry_is_the_checked_one(cache, monkeypatch):
    want = _tree_of(_uncached(monkeypatch))
    first = load_registry()  # checks and fills the cache
    assert cache.is_file() and _tree_of(first) == want
    checks = _count_checks(monkeypatch)
    again = load_registry()
    assert checks[0] == 0  # every item rebuilt, none checked again
    assert _tree_of(again) == want
    assert len(again.variants) > 100 and all(v.model_dump() == w.model_dump()
                                            for v, w in zip(again.variants.values(), first.variants.values()))


def test_an_edited_file_is_checked_again_and_its_errors_found(cache, registry_copy, monkeypatch):
    load_registry(registry_copy)
    path = registry_copy / "models.toml"
    text = path.read_text()
    edited = text.replace("\n[[model]]", "\n[[model]]\nbogus_key = 1", 1)
    path.write_text(edited)
    with pytest.raises(RegistryError) as exc:
        load_registry(registry_copy)
    assert any("bogus_key" in d.format() for d in exc.value.diagnostics)
    path.write_text(text)
    assert _tree_of(load_registry(registry_copy)) == _tree_of(_uncached(monkeypatch, registry_copy))


def test_the_cache_never_serves_another_texts_item(cache, registry_copy, monkeypatch):
    """A variant whose text changed (same size) gets its new value, not the one cached for the old text."""
    load_registry(registry_copy)
    path = next(p for p in sorted((registry_copy / "variants").glob("*.toml")) if 'summary = "' in p.read_text())
    text = path.read_text()
    i = text.index('summary = "') + len('summary = "')
    edited = text[:i] + ("X" if text[i] != "X" else "Y") + text[i + 1:]
    path.write_text(edited)
    got = _tree_of(load_registry(registry_copy))
    assert got == _tree_of(_uncached(monkeypatch, registry_copy))
    path.write_text(text)
    assert got != _tree_of(load_registry(registry_copy))


def test_a_damaged_cache_is_checked_again(cache, monkeypatch):
    want = _tree_of(_uncached(monkeypatch))
    load_registry()
    good = cache.read_bytes()
    head, _, body = good.partition(b"\n")
    entries = json.loads(body)
    key = next(k for k in entries if k.startswith("Variant:"))
    for bad in [
        good[: len(good) // 2],  # truncated
        good[:-10] + b"0123456789",  # flipped bytes: the checksum differs
        b"",
        b"\xff\xfe\x00garbage",
        head.replace(b"r9k-validated/", b"r9k-validated/9") + b"\n" + body,  # another format
    ]:
        cache.write_bytes(bad)
        assert _tree_of(load_registry()) == want
        assert cache.read_bytes().startswith(head.rsplit(b" ", 1)[0])  # written again, whole
    # well-formed, checksum right, but an entry of the wrong shape: that item is checked again
    for damaged in ({"id": "x"}, "not an object", {**entries[key], "unknown_field": 1}):
        body2 = json.dumps({**entries, key: damaged}).encode()
        cache.write_bytes(head.rsplit(b" ", 1)[0] + b" " + hashlib.sha256(body2).hexdigest().encode() + b"\n" + body2)
        assert _tree_of(load_registry()) == want


def test_a_fifo_or_an_outside_link_at_the_cache_path_is_left_alone(cache, tmp_path, monkeypatch):
    want = _tree_of(_uncached(monkeypatch))
    cache.parent.mkdir(parents=True)
    os.mkfifo(cache)
    got = []
    t = threading.Thread(target=lambda: got.append(_tree_of(load_registry())), daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive(), "reading the cache blocked on a FIFO"
    assert got == [want] and cache.is_fifo()
    cache.unlink()

    load_registry()
    shutil.move(cache, tmp_path / "outside.json")  # a cache someone else's: valid, but not in the cache folder
    outside = tmp_path / "outside.json"
    before = outside.read_bytes()
    cache.symlink_to(outside)
    checks = _count_checks(monkeypatch)
    assert _tree_of(load_registry()) == want
    assert checks[0] > 100  # not read through the link: every item checked
    assert cache.is_symlink() and outside.read_bytes() == before  # nor written through it


def test_toolchain_versions_are_importlib_metadatas():
    names = sorted({d.metadata["Name"] for d in md.distributions() if d.metadata["Name"]})
    assert len(names) > 20
    asked = [n for n in names if P._fast_version(n) is P._ASK]
    assert len(asked) <= len(names) // 10, asked  # the fast path answers (its fallback would hide its errors)
    for name in names:
        assert P._dist_version.__wrapped__((name,)) == md.version(name), name
    assert P._dist_version.__wrapped__(("no-such-dist-r9k",)) is None
    assert P._dist_version.__wrapped__(("no-such-dist-r9k", names[0])) == md.version(names[0])


def test_toolchain_versions_ask_importlib_metadata_when_unsure(tmp_path, monkeypatch):
    """Two candidates in one folder: importlib.metadata decides, whatever it decides."""
    for v in ("1.0", "2.0"):
        d = tmp_path / f"r9k_probe_dist-{v}.dist-info"
        d.mkdir()
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: r9k-probe-dist\nVersion: {v}\n\nbody\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert P._fast_version("r9k-probe-dist") is P._ASK
    assert P._dist_version.__wrapped__(("r9k-probe-dist",)) == md.version("r9k-probe-dist")
    shutil.rmtree(tmp_path / "r9k_probe_dist-2.0.dist-info")
    assert P._fast_version("R9K.Probe_Dist") == "1.0" == md.version("R9K.Probe_Dist")


def test_a_warm_validate_builds_no_pydantic_validator(tmp_path):
    """The point of the cache: a new process validating with warm caches checks nothing with pydantic (it does
    not even import it: the schema's classes are plain, registry/plainmodel.py; no importlib.metadata), and
    says what a cold one says."""
    env = dict(os.environ, **{envvars.CACHE_DIR.name: str(tmp_path / "cache")})
    env.pop(envvars.NO_CACHE.name, None)
    code = (
        "import contextlib, io, json, sys\n"
        "from r9k.r9kctl import cli\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):\n"
        "    rc = cli.main(['validate', '--profile', 'tp4-default'])\n"
        "imported = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core'))\n"
        "from r9k.registry import plainmodel\n"
        "built = sorted(c.__name__ for c, t in plainmodel._TWINS.items()\n"
        "               if type(t.__dict__.get('__pydantic_validator__')).__name__ != 'MockValSer')\n"
        "print(json.dumps([rc, out.getvalue(), built, 'importlib.metadata' in sys.modules, imported]))\n")
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                      timeout=600, check=True).stdout) for _ in range(2)]
    cold, warm = runs
    assert cold[0] == warm[0] and cold[1] == warm[1] and "tp4-default" in warm[1]
    assert cold[2] and cold[4]  # the cold run checked with pydantic
    assert warm[2] == [] and warm[3] is False and warm[4] == []


def test_module_exists_answers_as_find_spec_without_importing_the_parents():
    """availability.module_exists looks into a package not imported yet instead of importing it: the same
    answers as importlib.util.find_spec (asked afterwards, in the same new process) for every module the
    registry and the adapters name, their parents, and names that do not exist."""
    code = (
        "import importlib.util, json, sys\n"
        "from r9k.registry import availability as A, load_registry\n"
        "reg = load_registry()\n"
        "names = sorted({v.implementation.module for v in reg.variants.values() if v.implementation.module}\n"
        "               | {a.adapter_module for a in A.load_adapters().adapters.values()})\n"
        "names += sorted({n.rpartition('.')[0] for n in names}) + ['r9k.kernels.no_such_op', 'r9k.no_such.x',\n"
        "          'r9k.plugin.no_such.deeper', 'json.decoder.not_a_package', 'no_such_top.x', 'os.path', 'r9k']\n"
        "before = [m for m in ('r9k.plugin', 'r9k.kernels') if m in sys.modules]\n"
        "fast = [A.module_exists(n) for n in names]\n"
        "imported = [m for m in ('r9k.plugin', 'r9k.kernels') if m in sys.modules and m not in before]\n"
        "def real(n):\n"
        "    try:\n"
        "        return importlib.util.find_spec(n) is not None\n"
        "    except (ImportError, ValueError):\n"
        "        return False\n"
        "print(json.dumps([names, fast, [real(n) for n in names], imported]))\n")
    names, fast, real, imported = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                                            text=True, timeout=600, check=True).stdout)
    assert len(names) > 15 and any(fast) and not all(fast)
    assert dict(zip(names, fast)) == dict(zip(names, real))
    assert imported == []


def test_missing_tests_finds_what_the_pattern_per_test_found(tmp_path):
    """availability.missing_tests scans a file's def lines once instead of compiling a pattern per test id:
    the same answers as the pattern (``^\\s*(async\\s+)?def NAME\\s*\\(``) for every declared gate test and for
    near misses (a longer name, a name only in a comment or string, a class method, async, parameters)."""
    import re

    from r9k.registry import availability as A
    from r9k.registry.ledger import repo_root

    def old(tests, root):
        out = []
        for t in tests:
            file, _, name = t.partition("::")
            try:
                text = (root / file).read_text(encoding="utf-8")
            except OSError:
                out.append(f"{t} (no file {file})")
                continue
            func = re.sub(r"\[.*$", "", name.split("::")[-1])
            if func and not re.search(rf"^\s*(async\s+)?def {re.escape(func)}\s*\(", text, re.M):
                out.append(f"{t} (no test {func} in {file})")
        return out

    reg = load_registry()
    root = repo_root(reg)
    shipped = sorted({t for v in reg.variants.values() if v.gate for t in v.gate.tests})
    assert len(shipped) > 20
    assert A.missing_tests(shipped, root) == old(shipped, root) == []
    (tmp_path / "t.py").write_text("def test_add_gpu():\n    pass\n# def test_comment():\nx = 'def test_str():'\n"
                                   "class TestK:\n    async def test_m (self):\n        pass\ndef  test_two_spaces():\n")
    probes = [f"t.py::{n}" for n in ("test_add", "test_add_gpu", "test_comment", "test_str", "TestK::test_m",
                                     "test_m[1-2]", "test_two_spaces", "test_add_gpu[x::y]", "")] + ["nofile.py::x"]
    assert A.missing_tests(probes, tmp_path) == old(probes, tmp_path)
    assert len(old(probes, tmp_path)) == 6
