"""The control panel's diff view: no Python None anywhere, release numbers under their release's name."""
from rich.console import Console

from r9k.r9kctl.tui.diff_screen import diff_renderable
from r9k.registry import load_registry
from r9k.registry.diff import diff


def _text(reg, a, b) -> str:
    c = Console(width=320, record=True, file=open("/dev/null", "w"))
    c.print(diff_renderable(reg, diff(reg, a, b), a, b))
    return c.export_text()


def test_no_value_is_a_dash_and_numbers_are_labelled_by_release():
    reg = load_registry()
    text = _text(reg, "tp2-default", "v0.3.1")  # a profile (extends release v0.3.2) against a release
    assert "None" not in text
    assert "release v0.3.2" in text and "release v0.3.1" in text  # the numbers' columns
    assert "Numbers of release v0.3.2 and release v0.3.1" in text
    text = _text(reg, "v0.3.0", "v0.3.1")
    assert "None" not in text
    assert "measured, left off" in text and "R9K_HC_FP8_DECODE_KB" in text
    assert "567 [reference: 581]" in text and "unchanged (notes)" in text
    assert "7 vs 8 discordant" in text
