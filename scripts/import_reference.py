"""One-time import of the original stack's facts into the registry's schema.

Reads ../shared/reference/knob-catalog.toml and releases.toml and writes registry/variants/<area>.toml
and registry/releases/<version>.toml. The written files are the source of truth from then on (they are
edited by hand and by tools); this script is kept to show how each field was derived, and it refuses
to overwrite existing files unless --force is given.

    python scripts/import_reference.py --reference ../shared/reference [--force]
"""
from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

import tomlkit

ROOT = Path(__file__).resolve().parent.parent

# Variants this project fuses or ports (the decode fusions of the v0.2.0 and v0.3.1 notes).
FUSIONS = {
    "router_gemm", "qsa_indexer_glue", "hc_decode_mix", "hc_fp8_decode", "shared_expert_fused",
    "gdn_spec_decode_core", "fp8_block_fused_act_quant", "fused_qk_norm_rope", "moe_fused_routing",
    "moe_shared_fold", "moe_fused_sum", "moe_fused_act_quant", "hc_glue",
}
# Knob -> (kernel module, op, vLLM extension point) of this project (r9k.kernels.ops), filled in as the
# kernels land; every other knob is "env-only".
IMPLEMENTATIONS = {
    "fp8_block_fused_act_quant": ("r9k.kernels.fp8_block", "fp8_block_linear", "custom_op:r9k_fp8_block_linear"),
    "fp8_block_linears": ("r9k.kernels.fp8_block", "fp8_block_linear", "custom_op:r9k_fp8_block_linear"),
    "hc_decode_mix": ("r9k.kernels.hc_mix", "hc_mix", "custom_op:r9k_hc_mix"),
    "hc_fp8_decode": ("r9k.kernels.hc_mix", "hc_mix_fp8", "custom_op:r9k_hc_mix"),
    "router_gemm": ("r9k.kernels.router", "router_gemm", "pluggable_layer:gate_linear"),
    "moe_fused_routing": ("r9k.kernels.router", "moe_route", "custom_op:r9k_moe_route"),
    "qsa_indexer_glue": ("r9k.kernels.qsa_glue", "qsa_glue", "custom_op:r9k_qsa_glue"),
    "fused_qk_norm_rope": ("r9k.kernels.qk_rope", "qk_norm_rope", "custom_op:r9k_qk_norm_rope"),
    "shared_expert_fused": ("r9k.kernels.shared_expert", "shared_expert", "custom_op:r9k_shared_expert"),
    "gdn_spec_decode_core": ("r9k.kernels.gdn_decode", "gdn_decode",
                             "pluggable_layer:qwen_gated_delta_net_attention"),
}
# Parts the 27B (dense, no hyper-connections, no QSA) does not have.
FN_ONLY_PREFIXES = ("hc_", "qsa_", "ple_", "mtp_", "fused_qk_norm_rope", "target_lm_head", "draft_lm_head")
# MoE parts: any MoE model, not the dense 27B.
MOE_PREFIXES = ("router_", "moe_", "shared_expert", "expert_cache", "lru_", "cold_expert")
DIAGNOSTIC_WORDS = ("histogram", "debug", "trace", "stats", "memsnap", "diag", "page_pad", "disable")
ENUM_NUMERIC = {"R9K_AR_QUANT_BITS", "R9K_AR4_BITS", "R9K_HC_MIX_LPR", "MTP"}
LAUNCHER_SETS = {
    "vllm serve --gpu-memory-utilization": ("vllm-arg", "--gpu-memory-utilization"),
    "vLLM compilation config cudagraph_capture_sizes": ("compilation-config", "cudagraph_capture_sizes"),
    "vllm serve --kv-cache-memory (GiB)": ("vllm-arg", "--kv-cache-memory"),
    "vllm serve --max-num-seqs": ("vllm-arg", "--max-num-seqs"),
    "vllm serve --max-num-batched-tokens": ("vllm-arg", "--max-num-batched-tokens"),
    "vllm serve --cpu-offload-gb, with --cpu-offload-params experts": ("vllm-arg", "--cpu-offload-gb"),
    "environment GPU_MAX_HW_QUEUES": ("env", "GPU_MAX_HW_QUEUES"),
    "vLLM compilation config cudagraph_mode": ("compilation-config", "cudagraph_mode"),
    "environment HSA_ENABLE_MWAITX": ("env", "HSA_ENABLE_MWAITX"),
    "vLLM attention backend CUSTOM (serve.sh)": ("attention-backend", "CUSTOM"),
}
STATUS = {"shipped-default": "default-on", "opt-in": "opt-in", "rejected": "rejected"}
# Knobs that change the graph vLLM compiles (their value must reach the compile-cache key).
GRAPH_AFFECTING = set(IMPLEMENTATIONS) | {"cudagraph_sizes", "cudagraph_mode", "mtp_spec_tokens", "hc_glue", "moe_fused_sum",
                              "moe_fused_act_quant", "hc_fp8_prefill_mix", "qsa_sparse_attention",
                              "qsa_indexer_score", "moe_shared_fold", "hc_free_bf16", "hc_fp8_down"}

# The model dims the memory formulas read are in registry/models.toml (docs/semantics.md 1.1).


def is_num(s: str) -> bool:
    return re.fullmatch(r"-?\d+(\.\d+)?", s) is not None


def infer_type(v: dict) -> dict:
    vals = [str(x) for x in v["values"]]
    knob = v["knob"]
    out: dict = {}
    allow_unset = "" in vals
    vals_nz = [x for x in vals if x != ""]
    if sorted(vals_nz) == ["0", "1"]:
        out["type"] = "bool"
    elif any(x.startswith("<path") for x in vals_nz) and not any(x == "qwen-fixed" for x in vals_nz):
        out["type"] = "path"
    elif any(x.startswith("<regex") for x in vals_nz) or any(("," in x or ";" in x) for x in vals_nz) \
            or "N,K=cfg;..." in vals_nz or knob in ("R9K_DISABLE", "DRAFT"):
        out["type"] = "string"
    elif vals_nz == ["<seconds>"]:
        out["type"] = "float"
        out["range"] = {"min": 0}
    elif "auto" in vals_nz and any(re.fullmatch(r"\d+-\d+", x) for x in vals_nz):
        lo, hi = next(x for x in vals_nz if re.fullmatch(r"\d+-\d+", x)).split("-")
        out.update(type="int", range={"min": int(lo), "max": int(hi)}, special=["auto"])
    elif vals_nz and all(is_num(x) for x in vals_nz) and knob not in ENUM_NUMERIC:
        isfloat = any("." in x for x in vals_nz)
        out["type"] = "float" if isfloat else "int"
        lo = min(float(x) for x in vals_nz)
        rng = {"min": min(0, int(lo)) if not isfloat else 0}
        if knob == "UTIL":
            rng = {"min": 0.5, "max": 1.0}
        out["range"] = rng
    else:
        out["type"] = "enum"
        choices = vals_nz
        if knob == "CHAT_TEMPLATE":
            out["type"] = "string"
        else:
            out["choices"] = choices
    if allow_unset:
        out["allow_unset"] = True
    return out


def category(v: dict, typ: str) -> str:
    text = (v["id"] + " " + v["knob"]).lower()
    if v.get("sets") or not v["knob"].startswith("R9K_"):
        return "launcher"
    if any(w in text for w in DIAGNOSTIC_WORDS):
        return "diagnostic"
    if v["id"] in FUSIONS:
        return "fusion"
    if typ in ("int", "float") or (typ == "string" and v.get("stock_value") is None) or typ == "path":
        return "tuning"
    if v["area"] == "comm":
        return "comm"
    return "kernel"


def status_reason(v: dict) -> str:
    st = v["status"]
    note = v.get("note")
    meas = v.get("measured") or []
    if st == "rejected":
        bits = [note] if note else []
        bits += [f"{m['metric']}: {m.get('before', '?')} -> {m.get('after', '?')}" for m in meas[:2]]
        return "; ".join(bits) if bits else "rejected by the original stack (its catalog records no reason)"
    if st == "opt-in":
        return note or "off by default in the original stack's launchers; set the knob to use it"
    return "shipped in the original stack's launchers" + (f" ({v['since']})" if v.get("since") else "")


def memory(v: dict) -> dict | None:
    """The original's statement of a knob's memory cost, kept as ``memory.note``. The costs themselves are
    formulas of the model's dims (``memory.formula``, written by hand after the import; registry/memory.py)."""
    text = v.get("memory_cost")
    return {"note": text} if text else None


def convert_variant(v: dict) -> dict:
    t = infer_type(v)
    out: dict = {"id": v["id"], "knob": v["knob"]}
    if v.get("also_knobs"):
        out["also_knobs"] = v["also_knobs"]
    out["summary"] = v["summary"]
    out["category"] = category(v, t["type"])
    out["area"] = v["area"]
    out.update(t)
    stock = v.get("stock_value")
    if stock is not None:
        out["stock"] = str(stock)
    defaults = {}
    for tp in ("tp4", "tp2"):
        if f"default_{tp}" in v:
            defaults[tp] = str(v[f"default_{tp}"])
    if defaults:
        out["defaults"] = defaults
    if "default_27b_tp2" in v:
        out["model_defaults"] = {"qwen3.8-27b": {"tp2": str(v["default_27b_tp2"])}}
    if v["knob"] in ("R9K_DISABLE",):
        pass
    out["status"] = {"state": STATUS[v["status"]], "reason": status_reason(v)}
    if v.get("since"):
        out["since"] = v["since"]
    if v.get("requires"):
        out["requires"] = v["requires"]
    if v["id"].startswith(FN_ONLY_PREFIXES):
        out["models"] = ["qwen3.8-flash-next"]
    if v["id"].startswith(MOE_PREFIXES):
        out["excluded_models"] = ["qwen3.8-27b"]
    if v["id"] in GRAPH_AFFECTING:
        out["graph_affecting"] = True
    if v.get("sets"):
        kind, name = LAUNCHER_SETS[v["sets"]]
        out["sets"] = {"kind": kind, "name": name, "text": v["sets"]}
    if v.get("note"):
        out["note"] = v["note"]
    mod, op, point = IMPLEMENTATIONS.get(v["id"], (None, None, "env-only"))
    impl = {} if mod is None else {"module": mod, "op": op,
                                   "sources": [mod.replace("r9k.kernels", "kernels").replace(".", "/") + "/"]}
    impl["extension_point"] = point
    out["implementation"] = impl
    out["original"] = {"files": v.get("kernel_files", []), "platforms": ["rocm-gfx1201"]}
    mem = memory(v)
    if mem:
        out["memory"] = mem
    if v.get("gate"):
        g = v["gate"]
        gate = {"kind": g.get("kind", [])}
        if g.get("tests"):
            gate["original_tests"] = g["tests"]
        if g.get("eval"):
            gate["eval"] = g["eval"]
        out["gate"] = gate
    if v.get("default_changes"):
        out["history"] = [
            {k: str(c[k]) for k in ("release", "tp", "from", "to", "note") if k in c} for c in v["default_changes"]
        ]
    if v.get("measured"):
        out["measured"] = []
        for m in v["measured"]:
            rec = {"release": m.get("release", v.get("since", "unknown")), "metric": m["metric"], "platform": "r9700"}
            for k in ("before", "after", "note"):
                if k in m:
                    rec[k] = str(m[k])
            out["measured"].append(rec)
    return out


# ------------------------------------------------------------------------------------------ releases

UNITS = {"_tok_s": "tok/s", "_ms": "ms", "_s": "s", "kv_cache_tokens": "tokens", "ttft_ms_by_prompt_tokens": "ms",
         "mtp_acceptance": "tokens a step", "eight_copies": "tok/s"}
# How a source key of releases.toml is named in the registry (see notes/registry-import.md).
METRIC_NAMES = {
    "decode_tok_s": "betterbench_decode_tok_s",
    "betterbench_combined_decode": "betterbench_decode_tok_s",
    "step_p50_ms": "betterbench_step_p50_ms",
    "decode_step_ms": "decode_step_ms",
    "ttft_p50_ms": "ttft_p50_ms",
    "update_p99_ms": "update_p99_ms",
    "kv_cache_tokens": "kv_cache_tokens",
    "mtp_acceptance": "mtp_acceptance",
    "ttft_at_8_concurrent_s": "ttft_at_8_concurrent_s",
}
TEXT_KEYS = {"sanity", "soak", "probe", "note", "overload_bad_answers", "eight_copies_one_prompt_tok_s",
             "previous_ttft_ms", "reference_ttft_ms", "kv_cache_tokens_before"}


def unit_of(metric: str) -> str | None:
    for suf, u in UNITS.items():
        if metric.endswith(suf) or metric.split("@")[0].endswith(suf):
            return u
    return None


def parse_number(raw) -> dict:
    """A number, a range 'a-b', '~n' or free text -> value/low/high/approx/text."""
    if isinstance(raw, (int, float)):
        return {"value": float(raw)}
    s = str(raw).strip()
    approx = s.startswith("~")
    core = s.lstrip("~").replace(",", "")
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*[-\u2013]\s*(-?\d+(?:\.\d+)?)", core)
    if m:
        return {"low": float(m.group(1)), "high": float(m.group(2)), "text": s}
    m = re.fullmatch(r"-?\d+(?:\.\d+)?", core)
    if m:
        d = {"value": float(core)}
        if approx:
            d["approx"] = True
        return d
    m = re.match(r"~?\s*(-?\d+(?:\.\d+)?)([kKM]?)(?![\w.])", core)
    if m:  # a number followed by words: keep the number (scaled by its k / M suffix) and the words
        scale = {"": 1, "k": 1_000, "K": 1_000, "M": 1_000_000}[m.group(2)]
        return {"value": float(m.group(1)) * scale, "approx": approx or scale != 1, "text": s}
    return {"text": s}


def bench_records(b: dict, version: str, single_stream_is_probe: bool) -> list[dict]:
    cfg = b["config"]
    src = b.get("source")
    recs = []

    def add(metric, raw, stack="ours", extra_source=None):
        num = parse_number(raw)
        rec = {"config": cfg, "metric": metric}
        rec.update(num)
        u = unit_of(metric)
        if u:
            rec["unit"] = u
        if stack != "ours":
            rec["stack"] = stack
        rec["source"] = extra_source or src
        recs.append(rec)

    for key, raw in b.items():
        if key in ("config", "source", "reference", "previous") or key in TEXT_KEYS:
            continue
        if isinstance(raw, dict):
            for sub, val in raw.items():
                if sub == "note":
                    add(f"{key}", val)
                    continue
                add(f"{key}@{sub}", val)
            continue
        metric = METRIC_NAMES.get(key, key)
        if key == "decode_tok_s" and single_stream_is_probe:
            metric = "single_stream_tok_s"
        add(metric, raw)
    ref = b.get("reference")
    if ref:
        for key, raw in ref.items():
            if key == "note":
                continue
            if isinstance(raw, str) and " / " in raw and key in ("prefill_tok_s", "concurrency_tok_s"):
                ours = b.get(key, {})
                subs = list(ours.keys()) if isinstance(ours, dict) else []
                parts = [p.strip() for p in raw.split(" / ")]
                if len(parts) == len(subs):
                    for sub, p in zip(subs, parts):
                        add(f"{key}@{sub}", p, stack="reference")
                    continue
            add(METRIC_NAMES.get(key, key), raw, stack="reference")
    return recs


def text_fields(b: dict) -> str | None:
    bits = [f"{k}: {b[k]}" for k in b if k in TEXT_KEYS]
    return "; ".join(bits) if bits else None


def quality_records(q: dict, version: str, prev: str | None) -> dict:
    out: dict = {"config": q["config"]}
    g = q.get("gsm8k")
    count = q.get("gsm8k_count", "")
    if g:
        m = re.match(r"(\d+\.\d+)%(?: \(([\d,]+)\))?(?: vs (\d+\.\d+)%(?: \(([\d,]+)\))?)?", g)
        if m:
            out["eval"] = "gsm8k-cot-800" if "800" in count else "gsm8k"
            out["accuracy_pct"] = float(m.group(1))
            if m.group(2):
                out["correct"] = int(m.group(2).replace(",", ""))
            if m.group(3):
                out["baseline_accuracy_pct"] = float(m.group(3))
            if m.group(4):
                out["baseline_correct"] = int(m.group(4).replace(",", ""))
        tot = re.match(r"([\d,]+)", count)
        if tot:
            out["total"] = int(tot.group(1).replace(",", ""))
        elif "800" in count:
            out["total"] = 800
    mc = q.get("mcnemar")
    if mc:
        b, c = [int(x) for x in mc["discordant"].split("/")]
        out["mcnemar"] = {"b": b, "c": c, "p": float(mc["p"])}
        if mc.get("vs"):
            out["mcnemar"]["vs"] = mc["vs"]
    if "paired vs" in count:
        out["baseline_label"] = count.split("paired vs ", 1)[1]
        m = re.search(r"(v\d+\.\d+\.\d+) defaults", count)
        if m:
            out["baseline_release"] = m.group(1)
    he = q.get("humaneval")
    if he:
        m = re.match(r"(\d+) / (\d+)", he)
        if m:
            out["humaneval_passed"], out["humaneval_total"] = int(m.group(1)), int(m.group(2))
    io = q.get("identical_outputs")
    if io:
        out["identical_outputs_pct"] = float(io.rstrip("%"))
    if q.get("sanity"):
        out["sanity"] = q["sanity"]
    texts = [f"{k}: {q[k]}" for k in ("gsm8k", "gsm8k_count", "humaneval", "unit_gates") if k in q]
    for k in ("per_fusion", "paired_thinking"):
        if k in q:
            texts.append(f"{k}: {q[k]}")
    out["text"] = "; ".join(texts) if texts else "(no quality numbers)"
    if q.get("note"):
        out["note"] = q["note"]
    return out


def convert_releases(rel: list[dict]) -> list[dict]:
    out = []
    prev = None
    for r in rel:
        version = r["version"]
        probe_era = version >= "v0.3.1"
        d = {"version": version, "date": r["date"], "headline": r["headline"]}
        for k in ("vllm_base", "power_cap"):
            if r.get(k):
                d[k] = r[k]
        if prev:
            d["previous"] = prev
        d["default_changes"] = []
        for c in r.get("knob_default_changes", []):
            ch = {k: str(c[k]) for k in ("knob", "tp", "from", "to", "note") if k in c}
            # "R9K_MOE_PREFILL_CFG / _CFG1": one change of two knobs, written as two.
            names = [n.strip() for n in ch["knob"].split(" / ")]
            for n in names:
                full = n if not n.startswith("_") else names[0].rsplit("_", 1)[0] + n
                d["default_changes"].append({**ch, "knob": full})
        if r.get("initial_defaults"):
            d["initial_defaults"] = r["initial_defaults"]
        d["bench"] = []
        for b in r.get("bench", []):
            recs = bench_records(b, version, probe_era)
            txt = text_fields(b)
            if txt:
                recs.append({"config": b["config"], "metric": "validation_notes", "text": txt, "source": b.get("source")})
            d["bench"] += recs
            # A 'previous' block holds the earlier release's numbers measured in this release's run:
            # they are measurements of the previous release, so they go there.
            if b.get("previous") and out:
                pb = dict(b["previous"])
                pb["config"] = b["config"]
                pb["source"] = f"{version} release notes, the {prev} column (same box, same run)"
                prev_recs = bench_records(pb, prev, probe_era)
                have = {(x["config"], x["metric"]) for x in out[-1]["bench"]}
                out[-1]["bench"] += [x for x in prev_recs if (x["config"], x["metric"]) not in have]
        # v0.3.x 'probe' single-stream numbers for the release before (the notes' v0.3.0 column).
        d["quality"] = [quality_records(q, version, prev) for q in r.get("quality", [])]
        if r.get("notes"):
            d["notes"] = r["notes"]
        out.append(d)
        prev = version
    return out


def dump(doc: dict, header: str) -> str:
    text = tomlkit.dumps(doc)
    return header + text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", type=Path, default=ROOT.parent / "shared" / "reference")
    ap.add_argument("--out", type=Path, default=ROOT / "registry")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    cat = tomllib.loads((args.reference / "knob-catalog.toml").read_text())
    rel = tomllib.loads((args.reference / "releases.toml").read_text())
    vdir, rdir = args.out / "variants", args.out / "releases"
    if not args.force and (any(vdir.glob("*.toml")) or any(rdir.glob("*.toml"))):
        print("registry files exist; pass --force to overwrite them", file=sys.stderr)
        return 2
    from r9k.registry import fileio  # the one writer (atomic; refuses links out of the folder)

    vdir.mkdir(parents=True, exist_ok=True)
    rdir.mkdir(parents=True, exist_ok=True)
    by_area: dict[str, list] = {}
    for v in cat["variant"]:
        by_area.setdefault(v["area"], []).append(convert_variant(v))
    for area, vs in sorted(by_area.items()):
        header = (f"# Variants of area '{area}': {len(vs)} knobs. Schema: registry/schema.py (Variant).\n"
                  "# Imported from the original stack's catalog (scripts/import_reference.py), then maintained here.\n"
                  "# Values are the strings exported as environment variables; defaults are those of the latest release.\n\n")
        fileio.atomic_write(vdir / f"{area}.toml", dump({"variant": vs}, header), "variants file")
    # Hand-made 'previous' release numbers are attached inside convert_releases.
    for r in convert_releases(rel["release"]):
        header = (f"# Release manifest {r['version']}. Schema: registry/schema.py (Release).\n"
                  "# Imported from the original stack's release record (scripts/import_reference.py).\n\n")
        fileio.atomic_write(rdir / f"{r['version']}.toml", dump(r, header), "release file")
    print(f"wrote {sum(len(v) for v in by_area.values())} variants in {len(by_area)} files and "
          f"{len(rel['release'])} releases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
