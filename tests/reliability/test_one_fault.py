"""One fault, one line: strict mode's "cannot run on this platform" verdicts are one line per profile, so a
real fault is not buried under them; the former exit-3 paths (a provenance file that is not UTF-8 or nests
too deeply, ``launch --dry-run`` with a cache folder that cannot be used) are one located line, exit 2."""
from __future__ import annotations

import pytest

from r9k.registry import envvars
from r9k.registry import provenance as P

from .harness import run_main


def test_strict_platform_verdicts_are_one_line_beside_a_real_fault(tmp_path):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "strictfault.toml").write_text('extends = "tp4-default"\nstrict = true\n[knobs]\nR9K_NOPE = "1"\n')
    code, out, err = run_main(["--profiles-dir", str(folder), "validate", "-p", "strictfault", "--strict"])
    errors = [ln for ln in err.splitlines() if "error[" in ln]
    assert code == 2
    kinds = sorted(ln.split("error[")[1].split("]")[0] for ln in errors)
    assert kinds.count("no-implementation") == 1, errors
    assert "strictfault.toml:4:" in next(ln for ln in errors if "unknown-variant" in ln)
    summary = next(ln for ln in errors if "no-implementation" in ln)
    assert "R9K_ROUTER=r9k" in summary and "cannot run on platform" in summary


def test_without_strict_each_verdict_stays_a_warning():
    code, out, err = run_main(["validate", "-p", "tp4-default"])
    assert sum("warning[no-implementation]" in ln for ln in err.splitlines()) > 1


@pytest.mark.parametrize("content,words", [
    (b'{"r9k_provenance": "caf\xe9"}', ("not UTF-8", "line 1")),
    (b"[" * 5000 + b"]" * 5000, ("nests deeper",)),
    (b"\xff\xfe{\x00}\x00", ("UTF-16",)),
])
def test_provenance_file_problems_are_located(tmp_path, content, words):
    f = tmp_path / "provenance.json"
    f.write_bytes(content)
    with pytest.raises(P.ProvenanceError) as ei:
        P.read(f)
    for w in words:
        assert w in str(ei.value)


@pytest.mark.parametrize("cache", ["file", "devfull"])
def test_launch_dry_run_with_an_unusable_cache_folder(tmp_path, cache):
    if cache == "file":
        where = tmp_path / "cache-is-a-file"
        where.write_text("x")
    else:
        where = "/dev/full"
    code, out, err = run_main(["launch", "-p", "cpu-smoke", "--dry-run"], {envvars.CACHE_DIR.name: str(where)})
    errors = [ln for ln in err.splitlines() if "error[" in ln]
    assert code == 2 and len(errors) == 1 and "error[internal]" not in err, err
    assert errors[0].startswith(str(where)) or str(where) in errors[0]
