"""A checkpoint config the Flash-Next build cannot serve is refused before any weight is read, with one line
naming the file and the field (r9k.plugin.models.flash_next.check_config, called when the model is built)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest



def _config(**over):
    from r9k.plugin.models import tiny_flash_next

    c = dict(tiny_flash_next.CONFIG, _name_or_path="/models/fn")
    c.update(over)
    return SimpleNamespace(**{k: v for k, v in c.items() if v is not None})


@pytest.mark.parametrize("over,field,words", [
    ({"hc_count": None}, "hc_count", "missing"),
    ({"hc_lowrank": None}, "hc_lowrank", "missing"),
    ({"hc_count": 1}, "hc_count", "at least 2 streams"),
    ({"layer_types": ["linear_attention"] * 3}, "layer_types", "3 entries for num_hidden_layers = 4"),
    ({"layer_types": ["linear_attention"] * 3 + ["sliding_window"]}, "layer_types", "unknown layer kinds"),
    ({"ple_layer_ids": [1]}, "ple_layer_ids", "not built on this backend"),
    ({"indexer_budget": 2048}, "indexer_budget", "2048 > max_position_embeddings 1024"),
])
def test_bad_configs_name_the_field(over, field, words):
    from r9k.plugin.models.checkpoint import CheckpointError, check_config

    with pytest.raises(CheckpointError) as e:
        check_config(_config(**over), max_model_len=512)
    msg = str(e.value)
    assert msg.startswith("/models/fn/config.json: error[bad-config]: " + field + ":"), msg
    assert words in msg and "\n" not in msg


def test_a_context_beyond_the_indexer_budget_is_served():
    from r9k.plugin.models.checkpoint import check_config

    cfg = _config()
    assert cfg.indexer_budget < 512 <= cfg.max_position_embeddings
    check_config(cfg, max_model_len=512)  # beyond the budget: the indexer's selection runs (plugin/models/qsa.py)
    check_config(cfg, max_model_len=cfg.max_position_embeddings)


def test_launch_refuses_a_bad_checkpoint_before_anything_starts(tmp_path, capsys, monkeypatch):
    """``r9kctl launch`` of a cpu-flash-next profile whose checkpoint lacks ``hc_count``: exit 2, one line naming
    the checkpoint's config.json and the field; nothing started (the dry run, too)."""
    import json

    from r9k.plugin.models import tiny_flash_next
    from r9k.r9kctl import cli

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    cfg = dict(tiny_flash_next.CONFIG, architectures=["Qwen4ExpForCausalLM"])
    del cfg["hc_count"]
    (ckpt / "config.json").write_text(json.dumps(cfg))
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "fn-bad.toml").write_text(f'''description = "a Flash-Next checkpoint without hc_count"
extends = "cpu-flash-next"
model_path = "{ckpt}"
''')
    from r9k.registry import envvars

    monkeypatch.setenv(envvars.CACHE_DIR.name, str(tmp_path / "cache"))

    profiles_dirs = [str(prof), str(envvars.repo_root() / "profiles")] if hasattr(envvars, "repo_root") else None
    rc = cli.main(["launch", "--profile", "fn-bad", "--profiles-dir", str(prof), "--dry-run"])
    out, err = capsys.readouterr()
    lines = [ln for ln in (out + err).splitlines() if "error[" in ln]
    assert rc == 2, out + err
    assert len(lines) == 1 and f"{ckpt}/config.json: error[bad-config]: hc_count: missing" in lines[0], out + err
