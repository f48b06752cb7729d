"""Model facts bound model-dependent ranges (issue 38 item 5): the MTP depths come from the served model's
``ranges`` in registry/models.toml, not from a fixed list in the variant."""
from r9k.registry import load_registry


def _lines(out, err, code):
    return [ln for ln in (out + err).splitlines() if f"error[{code}]" in ln]


def test_mtp_2_is_accepted_for_flash_next_and_5_is_refused_by_its_facts(r9kctl):
    rc, out, err = r9kctl("validate", "--profile", "tp2-default", "--set", "MTP=2")
    assert rc == 0, out + err  # MTP-2: published Flash-Next-class runs show it ahead of MTP-3 on some hardware
    rc, out, err = r9kctl("validate", "--profile", "tp2-default", "--set", "MTP=5")
    assert rc == 2
    line = _lines(out, err, "model-range")[0]
    assert line.startswith("<command line>:") and "MTP=5" in line and "qwen3.8-flash-next takes 1..4" in line, line
    rc, out, err = r9kctl("validate", "--profile", "tp2-default", "--set", "MTP=0")
    assert rc == 2 and "MTP" in out + err  # below what vLLM takes at all: the variant's own range


def test_the_range_is_the_models_and_a_profile_line_is_located(r9kctl, registry_copy, tmp_path):
    reg = load_registry()
    assert reg.models["qwen3.8-flash-next"].ranges["MTP"].max == 4
    f = registry_copy / "models.toml"
    text = f.read_text()
    assert "ranges = { MTP = { min = 1, max = 4," in text
    f.write_text(text.replace("ranges = { MTP = { min = 1, max = 4,", "ranges = { MTP = { min = 1, max = 3,", 1))
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "mine.toml").write_text('extends = "tp4-default"\n\n[knobs]\nMTP = 4\n')
    rc, out, err = r9kctl("--registry", str(registry_copy), "--profiles-dir", str(d), "validate", "--profile", "mine")
    assert rc == 2, out + err
    line = _lines(out, err, "model-range")[0]
    assert "mine.toml:4:" in line and "takes 1..3" in line, line


def test_mtp_1_is_accepted_and_an_out_of_range_depth_is_one_located_error(r9kctl):
    rc, out, err = r9kctl("validate", "--profile", "tp4-default", "--set", "MTP=1")
    assert rc == 0, out + err
    rc, out, err = r9kctl("validate", "--profile", "tp4-default", "--set", "MTP=7")
    assert rc == 2
    assert len(_lines(out, err, "model-range")) == 1, out + err


def test_a_model_without_an_mtp_block_takes_no_depth(r9kctl):
    """The tiny Flash-Next has no MTP block (its facts say so): MTP unset validates, MTP=1 does not."""
    rc, out, err = r9kctl("validate", "--profile", "cpu-flash-next")
    assert rc == 0 or not _lines(out, err, "model-range"), out + err
    rc, out, err = r9kctl("validate", "--profile", "cpu-flash-next", "--set", "MTP=1")
    assert rc == 2, out + err
    (line,) = _lines(out, err, "model-range")
    assert line.startswith("<command line>:") and "tiny-flash-next takes no value (no MTP block" in line, line
