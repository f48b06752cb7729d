"""Corpus, part 1: the read path. Every file the registry is made of (a variants file, new or shipped, a
release, models.toml, a profile), broken in every way a file can be broken, seen from several commands."""
from __future__ import annotations

import os

import pytest

from .harness import REPO, Case, case_id, check

REG = ["--registry", "{T}/registry", "--profiles-dir", "{T}/p"]

NEW_VARIANT = """\
# a variant of the corpus
[[variant]]
id = "zz_extra"
knob = "R9K_ZZ_EXTRA"
summary = "corpus variant"
category = "tuning"
area = "other"
type = "bool"
stock = "0"

[variant.status]
state = "opt-in"
reason = "corpus"
"""

NEW_RELEASE = """\
# a release of the corpus
version = "v9.9.9"
date = "2030-01-01"
headline = "corpus release"
previous = "v0.3.2"
"""

PROFILE = """\
# a profile of the corpus
description = "corpus"
extends = "tp4-default"

[knobs]
R9K_ROUTER = "r9k"
"""


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _insert(text: str, at: int, line: str) -> str:
    """``line`` inserted so that it becomes line ``at`` (1-based)."""
    ls = _lines(text)
    ls.insert(at - 1, line)
    return "\n".join(ls)


def _first_key_line(text: str) -> int:
    for n, ln in enumerate(_lines(text), 1):
        s = ln.strip()
        if s and not s.startswith("#") and not s.startswith("[") and "=" in s:
            return n
    raise AssertionError("no key")


def _end(text: str) -> int:
    """The line an appended line gets."""
    return len(text.rstrip("\n").split("\n")) + 1


def content_faults(text: str):
    """(name, bytes, line, kind) of each way to break a TOML text; line None: no line (or any)."""
    enc = text.encode("utf-8")
    k = _first_key_line(text)
    first = _lines(text)[k - 1]
    end = _end(text)
    base = text.rstrip("\n") + "\n"
    yield "latin1-comment", _insert(text, 2, "# caf\udce9").encode("utf-8", "surrogateescape"), 2, "encoding"
    yield "latin1-value", (base + 'zz = "na\udcefve"\n').encode("utf-8", "surrogateescape"), end, "encoding"
    yield "cp1252-quotes", _insert(text, 2, "# \udc93quoted\udc94").encode("utf-8", "surrogateescape"), 2, "encoding"
    yield "utf16-le-bom", text.encode("utf-16"), 1, "encoding"
    yield "utf16-be-bom", ("\ufeff" + text).encode("utf-16-be"), 1, "encoding"
    yield "utf16-no-bom", text.encode("utf-16-le"), 1, "encoding"
    yield "utf32-bom", text.encode("utf-32"), 1, "encoding"
    yield "nul-byte", _insert(text, 3, "# \x00").encode(), 3, "encoding"
    yield "truncated-utf8", enc.rstrip(b"\n") + b"\n# \xe2\x82", end, "encoding"
    yield "invalid-start-byte", _insert(text, 2, "# \udcff").encode("utf-8", "surrogateescape"), 2, "encoding"
    yield "deep-arrays", (base + "deep = " + "[" * 40 + "]" * 40 + "\n").encode(), end, "too-deep"
    yield "deep-tables", (base + "deep = " + "{a = " * 40 + "1" + "}" * 40 + "\n").encode(), end, "too-deep"
    yield "recursion-arrays", (base + "deep = " + "[" * 3000 + "]" * 3000 + "\n").encode(), end, "too-deep"
    yield "unclosed-header", (base + "[knobs\n").encode(), end, "toml-syntax"
    yield "missing-value", (base + "x =\n").encode(), end, "toml-syntax"
    yield "duplicate-key", _insert(text, k + 1, first).encode(), k + 1, "toml-syntax"
    yield "unterminated-string", (base + 'x = "abc\n').encode(), end, "toml-syntax"
    yield "bad-escape", (base + 'x = "\\q"\n').encode(), end, "toml-syntax"
    yield "bare-word", (base + "this is not toml\n").encode(), end, "toml-syntax"


def fs_faults():
    """(name, make(path), kind) of each way a file can be no file."""
    def loop(p):
        os.symlink(p.name, p)

    def dangling(p):
        os.symlink("nowhere-" + p.name, p)

    def folder(p):
        p.mkdir()
        (p / "inside.toml").write_text("x = 1\n")

    def fifo(p):
        os.mkfifo(p)

    def huge(p):
        with open(p, "wb") as f:
            f.truncate(40 << 20)  # sparse: 40 MiB of nothing, over the 32 MiB limit

    yield "symlink-loop", loop, "symlink-loop"
    yield "dangling-symlink", dangling, "not-found"
    yield "directory", folder, "is-directory"
    yield "fifo", fifo, "not-a-file"
    yield "too-large", huge, "too-large"


# Targets: (name, tree-relative file, its valid text, commands that must fail on it)
TARGETS = [
    ("new-variants-file", "registry/variants/zz-extra.toml", NEW_VARIANT,
     [["validate"], ["list"]]),
    ("shipped-variants-file", "registry/variants/decode.toml", (REPO / "registry/variants/decode.toml").read_text(),
     [["validate", "--all"], ["show", "router_gemm"]]),
    ("new-release", "registry/releases/v9.9.9.toml", NEW_RELEASE, [["validate"], ["resolve", "-p", "tp4-default"]]),
    ("models", "registry/models.toml", (REPO / "registry/models.toml").read_text(),
     [["validate", "-p", "tp4-default"], ["list", "--format", "ids"]]),
]


def _cases():
    for tname, rel, text, commands in TARGETS:
        for fname, data, line, kind in content_faults(text):
            for cmd in commands:
                yield Case(f"{tname}/{fname}/{cmd[0]}", REG + cmd, {rel: data}, 2, rel.split("/")[-1], line, kind)
        for fname, make, kind in fs_faults():
            if tname == "models" and fname == "directory":
                continue  # models.toml is read by name: a folder there is covered by the others
            for cmd in commands[:1]:
                yield Case(f"{tname}/{fname}/{cmd[0]}", REG + cmd, {rel: make}, 2, rel.split("/")[-1], None, kind)
        # valid variations of the same file: a UTF-8 BOM, CRLF line ends
        yield Case(f"{tname}/utf8-bom-is-fine", REG + commands[0], {rel: b"\xef\xbb\xbf" + text.encode()}, 0,
                   errors=None)
        yield Case(f"{tname}/crlf-is-fine", REG + commands[0], {rel: text.replace("\n", "\r\n").encode()}, 0,
                   errors=None)
    # a profile: its own commands fail, the others do not read it and go on
    rel = "p/bad.toml"
    for fname, data, line, kind in content_faults(PROFILE):
        yield Case(f"profile/{fname}/validate-p", REG + ["validate", "-p", "bad"], {rel: data}, 2, "bad.toml", line,
                   kind)
        yield Case(f"profile/{fname}/validate-all", REG + ["validate", "--all"], {rel: data}, 2, "bad.toml", line,
                   kind)
        yield Case(f"profile/{fname}/list-goes-on", REG + ["list", "--format", "ids"], {rel: data}, 0, errors=None)
        yield Case(f"profile/{fname}/resolve-other-goes-on", REG + ["resolve", "-p", "tp4-default"], {rel: data}, 0,
                   errors=None)
    for fname, make, kind in fs_faults():
        yield Case(f"profile/{fname}/validate-all", REG + ["validate", "--all"], {rel: make}, 2, "bad.toml", None,
                   kind)
        yield Case(f"profile/{fname}/show-goes-on", REG + ["show", "R9K_ROUTER"], {rel: make}, 0, errors=None)
    # a child of a broken profile: the parent's one error, nothing else
    yield Case("profile/child-of-broken/resolve", REG + ["resolve", "-p", "child"],
               {rel: PROFILE + "[knobs\n", "p/child.toml": 'extends = "bad"\n'}, 2, "bad.toml", 7, "toml-syntax")


CASES = list(_cases())


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_file(tree, c):
    check(tree, c)
