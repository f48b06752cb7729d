"""The control panel's diff view: no Python None anywhere, release numbers under their release's name (on the
synthetic registry of tests/tui/fixtures; what is expected is read from its records)."""
from rich.console import Console

from r9k.r9kctl.tui.diff_screen import diff_renderable
from r9k.registry import load_registry
from r9k.registry.diff import diff


def _text(reg, a, b) -> str:
    c = Console(width=320, record=True, file=open("/dev/null", "w"))
    c.print(diff_renderable(reg, diff(reg, a, b), a, b))
    return c.export_text()


def test_no_value_is_a_dash_and_numbers_are_labelled_by_release(fx_workspace):
    reg = load_registry()
    base = reg.profiles["fx-tp4"].extends.removeprefix("release:")  # fx-tp2 extends fx-tp4, on this release
    old, new = "v9.0.0", reg.releases[base].previous
    text = _text(reg, "fx-tp2", new)  # a profile (extends a release through fx-tp4) against a release
    assert "None" not in text
    assert f"release {base}" in text and f"release {new}" in text  # the numbers' columns
    assert f"Numbers of release {base} and release {new}" in text

    text = _text(reg, old, new)
    assert "None" not in text
    left_off = [v for v in reg.variants.values() if v.status.state == "rejected" and v.since == new]
    assert left_off and all("measured, left off" in text and v.knob in text for v in left_off)
    seed, ref = ([r for r in reg.releases[new].bench if r.metric == "decode_tok_s" and r.origin == o][0]
                 for o in ("seed", "reference"))
    assert f"{seed.value:g} [reference: {ref.value:g}]" in text  # one row, the other record beside it
    assert any(r.unchanged for r in reg.releases[new].bench) and "unchanged (notes)" in text
    [q] = reg.releases[new].quality
    assert f"{q.mcnemar.b} vs {q.mcnemar.c} discordant" in text
