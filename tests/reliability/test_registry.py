"""Corpus, part 2: files that read fine but say something wrong. Schema errors at the offending key,
cross-file inconsistencies with both places, memory budgets that overflow or do not fit (knob, value,
line), and cascades that must stay one message."""
from __future__ import annotations

import pytest

from r9k.registry import envvars

from .harness import REPO, Case, case_id, check
from .test_files import NEW_RELEASE, NEW_VARIANT, PROFILE, REG

VFILE = "registry/variants/zz-extra.toml"
RFILE = "registry/releases/v9.9.9.toml"
MFILE = "registry/models.toml"
PFILE = "p/bad.toml"
MODELS = (REPO / "registry/models.toml").read_text()
DECODE = (REPO / "registry/variants/decode.toml").read_text()


def line_of(text: str, needle: str, start: int = 1) -> int:
    for n, ln in enumerate(text.split("\n"), 1):
        if n >= start and needle in ln:
            return n
    raise AssertionError(f"{needle!r} not found")


def replace(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def variant(old: str, new: str) -> tuple[str, int]:
    """NEW_VARIANT with ``old`` replaced by ``new``; the line of the new text."""
    text = replace(NEW_VARIANT, old, new)
    return text, line_of(text, new.split("\n")[-1])


def appended(text: str, extra: str) -> tuple[str, int]:
    out = text.rstrip("\n") + "\n" + extra
    return out, len(text.rstrip("\n").split("\n")) + 1


def _schema():
    v = ["validate"]
    for name, old, new in [
        ("knob-not-a-string", 'knob = "R9K_ZZ_EXTRA"', "knob = 5"),
        ("knob-lower-case", 'knob = "R9K_ZZ_EXTRA"', 'knob = "r9k_zz"'),
        ("id-not-snake", 'id = "zz_extra"', 'id = "Bad-Id"'),
        ("type-unknown", 'type = "bool"', 'type = "boolean"'),
        ("category-unknown", 'category = "tuning"', 'category = "fusionn"'),
        ("state-unknown", 'state = "opt-in"', 'state = "on"'),
        ("summary-empty", 'summary = "corpus variant"', 'summary = ""'),
        ("summary-a-table", 'summary = "corpus variant"', "summary = { text = 1 }"),
        ("unknown-key", 'summary = "corpus variant"', 'summary = "corpus variant"\ncolour = "blue"'),
        ("also-knobs-a-string", 'stock = "0"', 'stock = "0"\nalso_knobs = "R9K_ZZ_OTHER"'),
        ("requires-a-string", 'stock = "0"', 'stock = "0"\nrequires = "router_gemm"'),
        ("supported-tp-words", 'stock = "0"', 'stock = "0"\nsupported_tp = ["four"]'),
        ("defaults-bad-key", 'stock = "0"', 'stock = "0"\ndefaults = { four = "1" }'),
        ("changes-a-string", 'stock = "0"', 'stock = "0"\nchanges = "weights"'),
        ("changes-unknown", 'stock = "0"', 'stock = "0"\nchanges = ["colour"]'),
        ("status-a-string", '[variant.status]\nstate = "opt-in"\nreason = "corpus"', 'status = "opt-in"'),
    ]:
        text, ln = variant(old, new)
        yield Case(f"schema/variant/{name}", REG + v, {VFILE: text}, 2, "zz-extra.toml", ln, "schema")
    text, ln = appended(NEW_VARIANT, "\n[variant.memory]\nbasis = \"corpus\"\n\n[variant.memory.bytes_per_gpu]\n"
                                     "tp4 = \"lots\"\n")
    yield Case("schema/variant/memory-bytes-a-string", REG + v, {VFILE: text}, 2, "zz-extra.toml",
               line_of(text, 'tp4 = "lots"'), "schema")
    yield Case("schema/variants-file/variant-is-5", REG + v, {VFILE: "variant = 5\n"}, 2, "zz-extra.toml", 1, "schema")
    yield Case("schema/variants-file/variant-is-a-table", REG + v, {VFILE: "[variant]\nid = \"x\"\n"}, 2,
               "zz-extra.toml", 1, "schema")
    yield Case("schema/variants-file/unknown-top-key", REG + v, {VFILE: "foo = 1\n" + NEW_VARIANT}, 2,
               "zz-extra.toml", 1, "schema")
    yield Case("schema/variants-file/array-of-strings", REG + v, {VFILE: 'variant = ["a"]\n'}, 2, "zz-extra.toml",
               1, "schema")
    # releases
    for name, old, new in [
        ("date-yesterday", 'date = "2030-01-01"', 'date = "yesterday"'),
        ("date-month-13", 'date = "2030-01-01"', 'date = "2030-13-01"'),
        ("date-slashes", 'date = "2030-01-01"', 'date = "2030/01/01"'),
        ("date-a-number", 'date = "2030-01-01"', "date = 2030"),
        ("version-no-v", 'version = "v9.9.9"', 'version = "9.9.9"'),
        ("headline-a-list", 'headline = "corpus release"', 'headline = ["corpus"]'),
        ("previous-a-number", 'previous = "v0.3.2"', "previous = 3"),
        ("default-changes-5", 'previous = "v0.3.2"', 'previous = "v0.3.2"\ndefault_changes = 5'),
    ]:
        text = replace(NEW_RELEASE, old, new)
        yield Case(f"schema/release/{name}", REG + ["validate"], {RFILE: text}, 2, "v9.9.9.toml",
                   line_of(text, new.split("\n")[-1]), "schema")
    text = replace(NEW_RELEASE, 'version = "v9.9.9"', 'version = "v9.9.8"')
    yield Case("schema/release/version-not-file-name", REG + ["validate"], {RFILE: text}, 2, "v9.9.9.toml",
               line_of(text, "version ="), "schema")
    text, ln = appended(NEW_RELEASE, '\n[[default_changes]]\nknob = "R9K_ROUTER"\ntp = "all"\nto = "r9k"\n')
    yield Case("schema/release/change-without-from", REG + ["validate"], {RFILE: text}, 2, "v9.9.9.toml",
               line_of(text, "[[default_changes]]"), "schema")
    # models
    for name, new in [("kv-zero", "tp4 = 0, tp2 = 15_826"), ("kv-negative", "tp4 = -1, tp2 = 15_826"),
                      ("kv-string", 'tp4 = "many", tp2 = 15_826'), ("kv-bad-key", "four = 1, tp2 = 15_826"),
                      ("kv-huge", "tp4 = 1e300, tp2 = 15_826")]:
        text = replace(MODELS, "tp4 = 15_826, tp2 = 15_826", new)
        yield Case(f"schema/models/{name}", REG + ["validate"], {MFILE: text}, 2, "models.toml",
                   line_of(text, new.split(",")[0]), "schema")
    first = MODELS.index("[[model]]")
    second = MODELS.index("[[model]]", first + 1)
    text = MODELS.rstrip("\n") + "\n\n" + MODELS[first:second]
    yield Case("schema/models/duplicate-name", REG + ["validate"], {MFILE: text}, 2, "models.toml",
               len(MODELS.rstrip("\n").split("\n")) + 2, "duplicate", contains=("models.toml:6",))
    yield Case("schema/models/model-is-5", REG + ["validate"], {MFILE: "model = 5\n"}, 2, "models.toml", 1, "schema")
    # profiles
    for name, extra, kind in [
        ("tp-four", 'tp = "four"', "schema"), ("tp-zero", "tp = 0", "schema"), ("tp-negative", "tp = -2", "schema"),
        ("util-two", "gpu_memory_utilization = 2", "schema"), ("strict-a-string", 'strict = "perhaps"', "schema"),
        ("serve-args-a-string", 'serve_args = "--x"', "schema"), ("env-a-number", "env = 5", "schema"),
        ("unknown-key", 'colour = "blue"', "schema"), ("name-not-file-name", 'name = "other"', "schema"),
        ("knobs-a-list", None, "schema"),
    ]:
        if extra is None:
            text = replace(PROFILE, '[knobs]\nR9K_ROUTER = "r9k"', 'knobs = ["R9K_ROUTER"]')
            ln = line_of(text, "knobs =")
        else:
            text = replace(PROFILE, 'extends = "tp4-default"', f'extends = "tp4-default"\n{extra}')
            ln = line_of(text, extra)
        yield Case(f"schema/profile/{name}", REG + ["validate", "-p", "bad"], {PFILE: text}, 2, "bad.toml", ln, kind)
    for name, value in [("inf", "inf"), ("nan", "nan"), ("huge", "1e300"), ("zero", "0"), ("negative", "-4"),
                        ("a-string", '"lots"')]:
        text = replace(PROFILE, "[knobs]", f"[hardware]\ngpus = 4\nmemory_gib_per_gpu = {value}\n\n[knobs]")
        yield Case(f"schema/profile/memory-gib-{name}", REG + ["validate", "-p", "bad"], {PFILE: text}, 2, "bad.toml",
                   line_of(text, "memory_gib_per_gpu"), "schema")


def _semantics():
    val = ["validate", "-p", "bad"]
    for name, line, kind in [
        ('R9K_ROUTER = "fast"', 'R9K_ROUTER = "fast"', "bad-value"),
        ('R9K_ROUTR = "r9k"', 'R9K_ROUTR = "r9k"', "unknown-variant"),
        ('R9K_HC_FP8_DECODE = "yes please"', 'R9K_HC_FP8_DECODE = "yes please"', "bad-value"),
        ("UTIL = 1.5", "UTIL = 1.5", "bad-value"),
        ('KVMEM = "inf"', 'KVMEM = "inf"', "bad-value"),
        ('KVMEM = "nan"', 'KVMEM = "nan"', "bad-value"),
        ('KVMEM = "-3"', 'KVMEM = "-3"', "bad-value"),
    ]:
        text = replace(PROFILE, 'R9K_ROUTER = "r9k"', name)
        yield Case(f"semantics/profile/{kind}/{name.split()[0]}-{name.split()[-1]}", REG + val, {PFILE: text}, 2,
                   "bad.toml", line_of(text, line), kind)
    for name, extra, kind in [
        ("extends-unknown", 'extends = "tp4-defualt"', "unknown-extends"),
        ("extends-unknown-release", 'extends = "release:v0.0.9"', "unknown-release"),
        ("model-unknown", 'extends = "tp4-default"\nmodel = "qwen9"', "unknown-model"),
        ("extends-itself", 'extends = "bad"', "extends-cycle"),
    ]:
        text = replace(PROFILE, 'extends = "tp4-default"', extra)
        yield Case(f"semantics/profile/{name}", REG + val, {PFILE: text}, 2, "bad.toml",
                   line_of(text, extra.split("\n")[-1]), kind)


def _consistency():
    v = ["validate"]
    router_knob = line_of(DECODE, 'knob = "R9K_ROUTER"')
    router_head = line_of(DECODE, 'id = "router_gemm"') - 1
    text, ln = variant('knob = "R9K_ZZ_EXTRA"', 'knob = "R9K_ROUTER"')
    yield Case("consistency/duplicate-knob", REG + v, {VFILE: text}, 2, "zz-extra.toml", ln, "duplicate-knob",
               contains=(f"decode.toml:{router_knob}",))
    text, ln = variant('stock = "0"', 'stock = "0"\nalso_knobs = ["R9K_ROUTER"]')
    yield Case("consistency/also-knob-is-another-knob", REG + v, {VFILE: text}, 2, "zz-extra.toml", ln,
               "duplicate-knob", contains=(f"decode.toml:{router_knob}", "router_gemm"))
    text, ln = variant('stock = "0"', 'stock = "0"\nalso_knobs = ["R9K_ZZ_EXTRA"]')
    yield Case("consistency/also-knob-is-own-knob", REG + v, {VFILE: text}, 2, "zz-extra.toml", ln, "duplicate-knob")
    two = NEW_VARIANT + "\n" + NEW_VARIANT.replace('id = "zz_extra"', 'id = "zz_extra_two"').replace(
        "# a variant of the corpus\n", "")
    yield Case("consistency/duplicate-knob-same-file", REG + v, {VFILE: two}, 2, "zz-extra.toml",
               line_of(two, 'knob = "R9K_ZZ_EXTRA"', 5), "duplicate-knob", contains=("zz-extra.toml:4",))
    text, _ = variant('id = "zz_extra"', 'id = "router_gemm"')
    yield Case("consistency/duplicate-variant-id", REG + v, {VFILE: text}, 2, "zz-extra.toml", 2, "duplicate",
               contains=(f"decode.toml:{router_head}",))
    for field, value in [("models", '["qwen9"]'), ("excluded_models", '["qwen3.8-27bb"]')]:
        text, ln = variant('stock = "0"', f'stock = "0"\n{field} = {value}')
        yield Case(f"consistency/unknown-model-in-{field}", REG + v, {VFILE: text}, 2, "zz-extra.toml", ln,
                   "unknown-model", contains=("models.toml",))
    text, ln = appended(NEW_VARIANT, '\n[variant.model_defaults."qwen9"]\ntp4 = "1"\n')
    yield Case("consistency/unknown-model-in-model-defaults", REG + v, {VFILE: text}, 2, "zz-extra.toml", None,
               "unknown-model")
    for name, tests in [("no-such-file", "kernels/router/test_nope.py"),
                        ("no-such-test", "kernels/router/test_router.py::test_nope"),
                        ("no-such-class-test", "kernels/router/test_router.py::TestNope::test_x")]:
        text = replace(NEW_VARIANT, 'state = "opt-in"', 'state = "default-on"') + \
            f'\n[variant.gate]\nkind = ["bit-exact"]\ntests = ["{tests}"]\n'
        yield Case(f"consistency/gate-test/{name}", REG + v, {VFILE: text}, 2, "zz-extra.toml",
                   line_of(text, "tests ="), "unknown-test", env={envvars.REPO_ROOT.name: str(REPO)})
    # an opt-in variant's missing gate test is an error of the profile that switches it on
    text = NEW_VARIANT + '\n[variant.gate]\nkind = ["bit-exact"]\ntests = ["kernels/router/test_nope.py"]\n'
    prof = replace(PROFILE, 'R9K_ROUTER = "r9k"', 'R9K_ZZ_EXTRA = "1"')
    yield Case("consistency/gate-test/opt-in-switched-on", REG + ["validate", "-p", "bad"], {VFILE: text, PFILE: prof},
               2, "zz-extra.toml", line_of(text, "tests ="), "unknown-test", env={envvars.REPO_ROOT.name: str(REPO)})
    yield Case("consistency/gate-test/opt-in-left-off", REG + ["validate", "-p", "tp4-default"], {VFILE: text}, 0,
               errors=None, env={envvars.REPO_ROOT.name: str(REPO)})
    # releases
    text = replace(NEW_RELEASE, 'date = "2030-01-01"', 'date = "2020-01-01"')
    yield Case("consistency/release/previous-dated-later", REG + v, {RFILE: text}, 2, "v9.9.9.toml",
               line_of(text, "previous ="), "release-order", contains=("v0.3.2.toml",))
    text = replace(NEW_RELEASE, 'previous = "v0.3.2"', 'previous = "v9.9.9"')
    yield Case("consistency/release/previous-is-itself", REG + v, {RFILE: text}, 2, "v9.9.9.toml",
               line_of(text, "previous ="), "release-order")
    text = replace(NEW_RELEASE, 'previous = "v0.3.2"', 'previous = "v0.3.0"')
    yield Case("consistency/release/previous-skips-one", REG + v, {RFILE: text}, 2, "v9.9.9.toml",
               line_of(text, "previous ="), "release-order", contains=("v0.3.2",))
    text = replace(NEW_RELEASE, 'previous = "v0.3.2"', 'previous = "v0.0.1"')
    yield Case("consistency/release/previous-unknown", REG + v, {RFILE: text}, 2, "v9.9.9.toml",
               line_of(text, "previous ="), "unknown-release")
    for name, to, kind in [("to-illegal", "fast", "bad-value"), ("to-empty", "", "bad-value")]:
        text, _ = appended(NEW_RELEASE, f'\n[[default_changes]]\nknob = "R9K_ROUTER"\ntp = "all"\nfrom = "stock"\n'
                                        f'to = "{to}"\n')
        yield Case(f"consistency/release/change-{name}", REG + v, {RFILE: text}, 2, "v9.9.9.toml",
                   line_of(text, f'to = "{to}"'), kind)
    text, _ = appended(NEW_RELEASE, '\n[[default_changes]]\nknob = "R9K_ROUTR"\ntp = "all"\nfrom = "stock"\n'
                                    'to = "r9k"\n')
    yield Case("consistency/release/change-unknown-knob", REG + v, {RFILE: text}, 2, "v9.9.9.toml",
               line_of(text, 'knob = "R9K_ROUTR"'), "unknown-knob", contains=("did you mean R9K_ROUTER?",))
    # profiles: a field nothing reads, contradictory serve_args
    text = replace(PROFILE, 'extends = "tp4-default"', 'extends = "tp4-default"\ngpu_memory_utilization = 0.9')
    yield Case("consistency/profile/gpu-memory-utilization-unused", REG + ["validate", "-p", "bad"], {PFILE: text}, 2,
               "bad.toml", line_of(text, "gpu_memory_utilization"), "unused-field", contains=("UTIL",))
    for name, args in [("same-option-twice", '["--max-model-len", "4096", "--max-model-len", "8192"]'),
                       ("tp-differs", '["--tensor-parallel-size", "2"]'),
                       ("tp-equals-form", '["--tensor-parallel-size=8"]'),
                       ("model-in-serve-args", '["--model", "/x"]'),
                       ("knob-sets-it-too", '["--gpu-memory-utilization", "0.5"]')]:
        text = replace(PROFILE, 'extends = "tp4-default"', f'extends = "tp4-default"\ntp = 4\nserve_args = {args}')
        yield Case(f"consistency/profile/serve-args/{name}", REG + ["validate", "-p", "bad"], {PFILE: text}, 2,
                   "bad.toml", line_of(text, "serve_args"), "serve-args")


def _memory():
    val = ["validate", "-p", "tp4-default"]
    for value in ("1e300", "1e308", "99999999999"):
        yield Case(f"memory/set-KVMEM={value}", REG + val + ["--set", f"KVMEM={value}"], {}, 2, kind="memory",
                   contains=("KVMEM", value, "--set"))
    for value, kind in (("inf", "bad-value"), ("nan", "bad-value"), ("-1", "bad-value"), ("lots", "bad-value")):
        yield Case(f"memory/set-KVMEM={value}", REG + val + ["--set", f"KVMEM={value}"], {}, 2, kind=kind,
                   contains=("KVMEM",))
    yield Case("memory/set-KVMEM-too-big-to-fit", REG + val + ["--set", "KVMEM=100"], {}, 2, kind="memory",
               contains=("KVMEM=100", "--set"))
    # the layer that set the value: the --set on the command line (issue 27), not the profile's [hardware] line
    yield Case("memory/set-UTIL-leaves-no-room", REG + val + ["--set", "UTIL=0.5", "--set", "KVMEM="], {}, 2,
               "<command line>", 1, "memory", contains=("UTIL=0.5", "set by --set UTIL=0.5"))
    text = replace(PROFILE, 'R9K_ROUTER = "r9k"', 'KVMEM = "1e300"')
    yield Case("memory/profile-KVMEM-1e300", REG + ["validate", "-p", "bad"], {PFILE: text}, 2, "bad.toml",
               line_of(text, "KVMEM"), "memory", contains=("KVMEM=1e300",))
    text = replace(PROFILE, 'R9K_ROUTER = "r9k"', 'KVMEM = "64"')
    yield Case("memory/profile-KVMEM-too-big", REG + ["validate", "-p", "bad"], {PFILE: text}, 2, "bad.toml",
               line_of(text, "KVMEM"), "memory", contains=("KVMEM=64",))
    text = replace(PROFILE, "[knobs]", "[hardware]\ngpus = 4\nmemory_gib_per_gpu = 8\n\n[knobs]")
    yield Case("memory/profile-small-gpu", REG + ["validate", "-p", "bad"], {PFILE: text}, 2, "bad.toml",
               line_of(text, "memory_gib_per_gpu"), "memory")
    for value in ("1e300", "inf"):
        yield Case(f"memory/resolve-KVMEM={value}", REG + ["resolve", "-p", "tp4-default", "--set", f"KVMEM={value}"],
                   {}, 0 if value == "1e300" else 2, errors=None if value == "1e300" else 1)
        yield Case(f"memory/diff-KVMEM={value}", REG + ["diff", "tp4-default", "stock"], {}, 0, errors=None)


def _cascades():
    yield Case("cascade/models-missing", REG + ["validate", "--all"], {MFILE: None}, 2, "models.toml", None,
               "no-models")
    yield Case("cascade/models-empty", REG + ["validate", "--all"], {MFILE: ""}, 2, "models.toml", 1, "no-models")
    yield Case("cascade/models-only-comments", REG + ["validate", "--all"], {MFILE: "# nothing\n"}, 2, "models.toml",
               1, "no-models")
    children = {f"p/child{i}.toml": 'extends = "bad"\n' for i in range(5)}
    broken = PROFILE + "[knobs\n"
    yield Case("cascade/broken-parent-5-children", REG + ["validate", "--all"], {PFILE: broken, **children}, 2,
               "bad.toml", 7, "toml-syntax")
    bad_value = replace(PROFILE, 'R9K_ROUTER = "r9k"', 'R9K_ROUTER = "fast"')
    yield Case("cascade/bad-value-in-parent-5-children", REG + ["validate", "--all"], {PFILE: bad_value, **children},
               2, "bad.toml", line_of(bad_value, "fast"), "bad-value")
    bad_model = replace(PROFILE, 'extends = "tp4-default"', 'extends = "tp4-default"\nmodel = "qwen9"')
    yield Case("cascade/unknown-model-in-parent-5-children", REG + ["validate", "--all"],
               {PFILE: bad_model, **children}, 2, "bad.toml", line_of(bad_model, "qwen9"), "unknown-model")
    yield Case("cascade/releases-folder-missing", REG + ["validate", "--all"], {"registry/releases": None}, 2,
               "releases", None, "no-releases")
    yield Case("cascade/first-release-missing", REG + ["validate"], {"registry/releases/v0.1.0.toml": None}, 2,
               errors=2, kind="unknown-release", contains=("is named", "times"))
    yield Case("cascade/one-broken-variant-file", REG + ["validate", "--all"], {VFILE: NEW_VARIANT + "x ="}, 2,
               "zz-extra.toml", None, "toml-syntax")


CASES = list(_schema()) + list(_semantics()) + list(_consistency()) + list(_memory()) + list(_cascades())


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_registry(tree, c):
    check(tree, c)
