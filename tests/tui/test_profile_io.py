"""Round-trip profile editing (registry/profile_io.py): comments and layout kept, atomic writes,
concurrent edits detected, save-as never replacing a file."""
from __future__ import annotations

import os
import random
import secrets
import time

import pytest
import tomllib

from r9k.registry.profile_io import (ProfileConflict, ProfileDocument, atomic_write, find_profile_file,
                                     new_profile_text, save_as)


def _write(tmp_path, text: str, name: str = "p.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_set_and_remove_keep_comments_layout_and_types(tmp_path):
    tag = secrets.token_hex(4)
    split = random.randrange(2, 64)
    text = (f"# header {tag}\n"
            'description = "x"  # trailing\n'
            'extends = "release:v0.3.2"\n\n'
            "[hardware]\ngpus = 2\n\n"
            "[knobs]\n"
            f'R9K_ROUTER = "r9k"  # router {tag}\n'
            "# a comment between keys\n"
            f"R9K_ROUTER_SPLIT = {split}   # an int\n"
            "R9K_FLAG = true\n")
    p = _write(tmp_path, text)
    doc = ProfileDocument.load(p)
    assert not doc.dirty
    doc.set_knob("R9K_ROUTER", "stock")
    doc.set_knob("R9K_ROUTER_SPLIT", str(split + 1))
    doc.set_knob("R9K_FLAG", "0")
    doc.set_knob("R9K_NEW", "1")
    assert doc.remove_knob("R9K_MISSING") is False
    doc.save()
    out = p.read_text()
    assert f"# header {tag}" in out and "# trailing" in out and "# a comment between keys" in out
    assert f'R9K_ROUTER = "stock"  # router {tag}' in out
    assert f"R9K_ROUTER_SPLIT = {split + 1}   # an int" in out  # stays an integer, comment kept
    assert "R9K_FLAG = false" in out
    data = tomllib.loads(out)
    assert data["knobs"] == {"R9K_ROUTER": "stock", "R9K_ROUTER_SPLIT": split + 1, "R9K_FLAG": False,
                             "R9K_NEW": "1"}
    assert data["hardware"] == {"gpus": 2}
    # everything else byte for byte: only the touched lines differ
    changed = [a for a, b in zip(text.splitlines(), out.splitlines()) if a != b]
    assert len(changed) == 3
    doc2 = ProfileDocument.load(p)
    assert doc2.remove_knob("R9K_NEW") and doc2.remove_knob("R9K_FLAG")
    doc2.save()
    assert p.read_text() == text.replace('"r9k"', '"stock"').replace(f"= {split} ", f"= {split + 1} ") \
        .replace("R9K_FLAG = true\n", "")


@pytest.mark.parametrize("form", ["none", "inline", "dotted"])
def test_knobs_table_forms(tmp_path, form):
    head = '# keep\nextends = "stock"\n'
    body = {"none": "", "inline": 'knobs = { R9K_A = "1" }\n', "dotted": 'knobs.R9K_A = "1"\n'}[form]
    p = _write(tmp_path, head + body)
    doc = ProfileDocument.load(p)
    val = str(random.randrange(100))
    doc.set_knob("R9K_B", val)
    doc.save()
    data = tomllib.loads(p.read_text())
    want = {"R9K_B": val} if form == "none" else {"R9K_A": "1", "R9K_B": val}
    assert data["knobs"] == want and data["extends"] == "stock"
    assert p.read_text().startswith("# keep\n")


def test_atomic_write_leaves_no_temporary_and_keeps_mode(tmp_path):
    p = _write(tmp_path, "a = 1\n")
    os.chmod(p, 0o640)
    atomic_write(p, "a = 2\n")
    assert p.read_text() == "a = 2\n"
    assert (p.stat().st_mode & 0o777) == 0o640
    assert sorted(x.name for x in tmp_path.iterdir()) == ["p.toml"]


def test_concurrent_edit_is_a_conflict_but_a_touch_is_not(tmp_path):
    p = _write(tmp_path, 'extends = "stock"\n[knobs]\nR9K_A = "1"\n')
    doc = ProfileDocument.load(p)
    # touched only (same content, new mtime): not a conflict
    later = time.time() + 5
    os.utime(p, (later, later))
    assert not doc.changed_on_disk()
    # changed by someone else
    theirs = p.read_text() + f"# theirs {secrets.token_hex(3)}\n"
    p.write_text(theirs)
    assert doc.changed_on_disk()
    doc.set_knob("R9K_A", "0")
    with pytest.raises(ProfileConflict):
        doc.save()
    assert p.read_text() == theirs
    doc.save(force=True)
    assert 'R9K_A = "0"' in p.read_text()
    assert not doc.changed_on_disk()  # the new stamp is ours
    p.unlink()
    assert doc.changed_on_disk()  # deleted counts as changed


def test_save_as_creates_an_extending_profile_and_never_replaces(tmp_path):
    name = f"mine-{secrets.token_hex(2)}"
    target = save_as(tmp_path, name, "tp4-default", {"R9K_HC_FP8_DECODE": "0"})
    data = tomllib.loads(target.read_text())
    assert data["extends"] == "tp4-default" and data["knobs"] == {"R9K_HC_FP8_DECODE": "0"}
    with pytest.raises(FileExistsError):
        save_as(tmp_path, name, "tp4-default", {})
    with pytest.raises(ValueError):
        save_as(tmp_path, "Bad Name", "tp4-default", {})
    assert sorted(x.name for x in tmp_path.iterdir()) == [f"{name}.toml"]
    assert "extends" in new_profile_text("x", "y", {})


def test_find_profile_file_later_folder_wins(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "p.toml").write_text("")
    assert find_profile_file("p", [a, b]) == a / "p.toml"
    (b / "p.toml").write_text("")
    assert find_profile_file("p", [a, b]) == b / "p.toml"
    assert find_profile_file("q", [a, b]) is None
