"""What vLLM chose, per layer, beside what the profile requested of vLLM's own switches (issue 25).

Once the model is built (after ``load_model`` of vLLM's model runner, before the engine serves), this module
walks the model and reads vLLM's actual selections:

- attention layers: the backend class (``CPU_ATTN``, ``FLASH_ATTN``...) and its implementation;
- fused-MoE layers: the quant method, the backend the MoE oracle picked and the experts kernel, and for a
  Triton MoE path whether a tuned config file for this device and shape exists (else vLLM's default rules);
- linear layers: the quant method and, for a quantised one, its kernel;
- custom ops: each op enabled (vLLM's kernel: ``forward_cpu`` / ``forward_cuda``...) or native;
- GDN layers: the decode kernel.

It then compares each of the profile's vLLM switches away from stock (registry/variants/vllm.toml) with what
vLLM did: a requested choice vLLM did not make is a mismatch (strict mode: the start stops here, before the
engine serves). It also says, per kernel package of this project loaded here, whether a tuned-config file
for this device was used or the default rules (``kernels/_triton/tuned.py``).

The plugin calls :func:`install_hooks` at registration; the result is in :func:`current` (the status section).
"""
from __future__ import annotations

import os
import sys
from typing import Any, Optional
from ..registry.vllm_map import _active, mapping, switch_name
from .install import HOOKS

_choices: Optional[dict] = None


def current() -> Optional[dict]:
    """This process's reading (None until a model is built here)."""
    return _choices


# --- reading the built model ------------------------------------------------------------------------------

def _name(obj) -> Optional[str]:
    if obj is None:
        return None
    if hasattr(obj, "name") and not isinstance(obj, type) and hasattr(type(obj), "__members__"):
        return str(obj.name)  # an enum member
    return (obj if isinstance(obj, type) else type(obj)).__name__


def _bump(table: dict, kind: str, key: str, path: str, **extra) -> None:
    e = table.setdefault(kind, {}).setdefault(key, {"layers": 0, "first": path, **extra})
    e["layers"] += 1


def _moe_backend(qm) -> Optional[str]:
    for attr in ("unquantized_backend", "fp8_backend", "mxfp4_backend", "moe_backend", "backend"):
        v = getattr(qm, attr, None)
        if v is not None:
            return _name(v) if not isinstance(v, str) else v
    return None


def _moe_kernel(qm) -> Optional[str]:
    k = getattr(qm, "moe_kernel", None)
    if k is not None:
        inner = getattr(k, "fused_experts", None)
        return _name(inner) if inner is not None else _name(k)
    cls = getattr(qm, "experts_cls", None)
    return _name(cls) if cls is not None else None


def tuned_moe_config(E: int, N: int, dtype: Optional[str], block_shape=None) -> dict:
    """Which tuned config file vLLM's Triton MoE looks for at this shape on this device, and whether one
    exists (vLLM's own lookup order: ``VLLM_TUNED_CONFIG_FOLDER``, then its ``configs`` folder)."""
    from vllm.model_executor.layers.fused_moe import fused_moe as fm

    name = fm.get_config_file_name(E, N, dtype, block_shape)
    folders = [os.environ.get("VLLM_TUNED_CONFIG_FOLDER")] if os.environ.get("VLLM_TUNED_CONFIG_FOLDER") else []
    folders.append(os.path.join(os.path.dirname(os.path.realpath(fm.__file__)), "configs"))
    found = next((os.path.join(d, name) for d in folders if os.path.exists(os.path.join(d, name))), None)
    return {"E": E, "N": N, "dtype": dtype, "file_name": name, "file": found,
            "source": "tuned file" if found else "default rules (no tuned file for this device and shape)"}


def read_model(model, vllm_config=None) -> dict:
    """vLLM's selections in a built model: per layer kind, the choice and how many layers made it."""
    from vllm.model_executor.custom_op import CustomOp

    layers: dict[str, dict] = {}
    ops: dict[str, dict] = {}
    tuned: dict[str, dict] = {}
    for path, m in model.named_modules():
        backend = getattr(m, "attn_backend", None)
        if backend is not None and hasattr(m, "impl"):
            try:
                bname = backend.get_name()
            except Exception:  # noqa: BLE001 - a backend without a name: its class
                bname = _name(backend)
            _bump(layers, "attention", str(bname), path, impl=_name(m.impl))
        qm = getattr(m, "quant_method", None)
        is_moe = type(m).__name__ in ("FusedMoE", "SharedFusedMoE") or hasattr(m, "moe_config")
        if qm is not None and is_moe:
            be = _moe_backend(qm)
            _bump(layers, "moe", be or _name(qm), path, method=_name(qm), kernel=_moe_kernel(qm))
            if be and "TRITON" in be.upper():
                E = getattr(m, "local_num_experts", None) or getattr(m, "global_num_experts", None)
                N = getattr(m, "intermediate_size_per_partition", None)
                if E and N:
                    try:
                        t = tuned_moe_config(int(E), int(N), None)
                        tuned.setdefault(t["file_name"], dict(t, first=path))
                    except Exception as exc:  # noqa: BLE001 - say why it is not known
                        tuned.setdefault(path, {"source": f"unknown: {type(exc).__name__}: {exc}"})
            elif be:
                tuned.setdefault(f"backend {be}", {"source": f"not used: the {be} MoE backend reads no Triton MoE "
                                                             "config", "first": path})
        elif qm is not None and type(m).__name__.endswith("Linear"):
            kern = getattr(qm, "kernel", None)
            key = _name(kern) if kern is not None else _name(qm)
            _bump(layers, "linear", key, path, method=_name(qm))
        gdn = getattr(m, "gdn_decode_kernel", None)
        if isinstance(gdn, str):
            _bump(layers, "gdn", gdn, path)
        if isinstance(m, CustomOp) and hasattr(type(m), "name"):
            fm = getattr(m, "_forward_method", None)
            fname = getattr(fm, "__name__", None) or _name(fm)
            e = ops.setdefault(type(m).name, {"layers": 0, "path": fname, "first": path})
            e["layers"] += 1
    cc = getattr(vllm_config, "compilation_config", None) if vllm_config is not None else None
    if cc is None:
        try:
            from vllm.config import get_cached_compilation_config

            cc = get_cached_compilation_config()
        except Exception:  # noqa: BLE001
            cc = None
    enabled = set(getattr(cc, "enabled_custom_ops", ()) or ())
    disabled = set(getattr(cc, "disabled_custom_ops", ()) or ())
    for name, e in ops.items():
        e["enabled"] = name in enabled if (name in enabled or name in disabled) else None
    return {"layers": layers, "custom_ops": ops, "moe_tuned_config": tuned,
            "custom_ops_setting": list(getattr(cc, "custom_ops", []) or [])}


def r9k_tuned() -> dict:
    """Per kernel package of this project loaded in this process: the tuned-config file for this device it
    uses, or the default rules (``kernels/_triton/tuned.py``)."""
    out = {}
    for modname, mod in sorted(list(sys.modules.items())):
        f = getattr(mod, "TUNED_FILE", None) if modname.startswith("r9k.kernels.") else None
        if not isinstance(f, str):
            continue
        pkg = modname.removeprefix("r9k.kernels.")
        ok = os.path.exists(f)
        out[pkg] = {"device": os.path.basename(f).removeprefix("tuned_").removesuffix(".json"), "file": f if ok else None,
                    "source": "tuned file" if ok else "default rules (no tuned file for this device)"}
    return out


# --- requested vs chosen --------------------------------------------------------------------------------

def _norm(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if v is None:
        return "None"
    return str(getattr(v, "name", v))


def _flat(s: str) -> str:
    return s.lower().replace("-", "_")


def compare(rs, chosen: dict, vllm_config=None, environ=None) -> list[dict]:
    """One row per vLLM switch of ``rs`` away from stock: requested, what vLLM chose, where (the layer kind it
    decides), state applied / mismatch / unverified (nothing of the built model shows it)."""
    environ = os.environ if environ is None else environ
    rows = []
    for r in sorted(rs.items.values(), key=lambda r: r.variant.knob):
        var = r.variant
        if var.vllm is None or var.sets is None or not _active(r):
            continue
        m = mapping(var.sets)
        row = {"knob": var.knob, "switch": switch_name(var), "layer": var.vllm.decides, "requested": r.value,
               "chosen": None, "state": "unverified", "note": ""}
        want = r.value
        if m.kind == "custom-op":
            e = chosen.get("custom_ops", {}).get(m.name)
            if e is None or e.get("enabled") is None:
                row["note"] = f"the model has no {m.name} layer"
            else:
                row.update(chosen=("+" if e["enabled"] else "-") + f" ({e['path']}, {e['layers']} layer(s))",
                           state="applied" if e["enabled"] == (want == "+") else "mismatch")
        elif m.name == "--attention-backend":
            got = sorted(chosen.get("layers", {}).get("attention", {}))
            if got:
                row.update(chosen=", ".join(got), state="applied" if got == [want] else "mismatch")
            else:
                row["note"] = "the model has no attention layer"
        elif m.name == "--moe-backend" or (m.kind == "json-field" and m.field == "moe_backend"):
            got = sorted(chosen.get("layers", {}).get("moe", {}))
            if not got:
                row["note"] = "the model has no MoE layer"
            else:
                ok = want == "auto" or all(_flat(want) in _flat(g) for g in got)
                row.update(chosen=", ".join(got), state="applied" if ok else "mismatch")
        elif m.name == "--linear-backend" or (m.kind == "json-field" and m.field == "linear_backend"):
            got = {k: e for k, e in chosen.get("layers", {}).get("linear", {}).items()
                   if "Unquantized" not in (e.get("method") or "")}
            if not got:
                row["note"] = "no quantised linear layer: the linear backend chooses for none"
            else:
                ok = want == "auto" or all(_flat(want) in _flat(k) for k in got)
                row.update(chosen=", ".join(sorted(got)), state="applied" if ok else "mismatch")
        elif m.kind == "json-field":
            sec = getattr(vllm_config, m.name.lstrip("-").replace("-", "_"), None) if vllm_config is not None else None
            if sec is not None and hasattr(sec, m.field or ""):
                got = _norm(getattr(sec, m.field))
                row.update(chosen=got, state="applied" if got == want else "mismatch")
        elif m.kind == "env":
            have = environ.get(m.name)
            try:
                import vllm.envs as venvs

                got = _norm(getattr(venvs, m.name))  # vLLM's own reading of the variable
            except Exception:  # noqa: BLE001
                got = have
            ok = have == want and (got == want or _norm(got) == want)
            row.update(chosen=f"{got} (vllm.envs.{m.name})", state="applied" if ok else "mismatch")
            if var.vllm.decides in chosen.get("layers", {}):
                row["note"] = "decides for " + ", ".join(
                    f"{k} ({e['layers']} layer(s))" for k, e in sorted(chosen["layers"][var.vllm.decides].items()))
        rows.append(row)
    return rows


def build(rs, model, vllm_config=None, environ=None, process: str = "") -> dict:
    chosen = read_model(model, vllm_config)
    rows = compare(rs, chosen, vllm_config, environ)
    return dict(chosen, process=process, rows=rows, mismatches=[r for r in rows if r["state"] == "mismatch"],
                r9k_tuned=r9k_tuned())


def table_lines(res: dict, prefix: str) -> list[str]:
    """The startup table's part: vLLM's choices per layer kind, then each requested switch."""
    lines = [f"{prefix} vLLM chose, per layer kind:"]
    for kind, d in sorted(res["layers"].items()):
        lines.append(f"{prefix}   {kind}: " + "; ".join(
            f"{k} x{e['layers']}" + (f" ({e.get('method') or e.get('impl') or ''}"
                                     + (f", kernel {e['kernel']}" if e.get("kernel") else "") + ")"
                                     if e.get("method") or e.get("impl") else "") for k, e in sorted(d.items())))
    if res["custom_ops"]:
        lines.append(f"{prefix}   custom ops: " + ", ".join(
            f"{'+' if e['enabled'] else '-' if e['enabled'] is not None else '?'}{n}" for n, e in
            sorted(res["custom_ops"].items())))
    for k, t in sorted(res["moe_tuned_config"].items()):
        lines.append(f"{prefix}   MoE config {k}: {t['source']}")
    for r in res["rows"]:
        mark = {"applied": "ok", "mismatch": "MISMATCH", "unverified": "unverified"}[r["state"]]
        lines.append(f"{prefix}   {mark:<10} {r['knob']} requested {r['requested']} ({r['switch']}, {r['layer']}); "
                     f"vLLM chose {r['chosen'] if r['chosen'] is not None else '?'}"
                     + (f": {r['note']}" if r["note"] else ""))
    for pkg, t in sorted(res.get("r9k_tuned", {}).items()):
        lines.append(f"{prefix}   r9k kernels {pkg}: {t['source']} (device {t['device']})")
    return lines


# --- the hook --------------------------------------------------------------------------------------------

#: The model runners whose ``load_model`` is wrapped: V1 and V2 of the GPU and CPU workers. vLLM picks V2 on a GPU
#: for the architectures and configurations ``VllmConfig.use_v2_model_runner`` names (0.26: Qwen2-MoE and dense
#: models; 0.34 has no V1 GPU runner); a subclass (0.32's ``MMEncoderModelRunner``) inherits the wrapped method.
#: ``r9kctl doctor`` reads which classes the workers instantiate and checks each is covered here.
RUNNERS = (("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"), ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner"),
           ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner"), ("vllm.v1.worker.cpu.model_runner", "CPUModelRunner"))
HOOKED = "load_model"


def on_model_built(runner) -> None:
    """Read the built model of ``runner``, record it in this process's status, log it; strict: a mismatch
    stops the start (the engine has not served yet)."""
    global _choices
    from .. import plugin

    rs = plugin.active_set()
    model = getattr(runner, "model", None)
    if rs is None or model is None:
        return
    try:
        model = runner.get_model() if hasattr(runner, "get_model") else model
    except Exception:  # noqa: BLE001
        pass
    proc = getattr(plugin, "_proc", None)
    res = build(rs, model, getattr(runner, "vllm_config", None), process=getattr(proc, "name", ""))
    _choices = res
    from . import fallback  # slow fallbacks against the declared fast paths (issue 38)

    fallback.check(rs, res, lambda ln: plugin._emit(30, ln))
    res["not_installed"] = absent = not_installed()
    for ln in absent:
        plugin._emit(30, f"r9k: NOT INSTALLED {ln}")
    plugin.record_vllm_choices(res)
    if rs.strict:
        fallback.refuse(res["fallbacks"])
        if absent:
            from .startup import StartupError

            raise StartupError([f"error[not-installed]: {ln} (strict mode)" for ln in absent],
                               "r9k: a requested kernel runs in no layer of this model; refusing to serve")
    if res["mismatches"] and rs.strict:
        from .startup import StartupError

        raise StartupError([f"error[not-chosen]: {r['knob']}: requested {r['requested']} ({r['switch']}), vLLM "
                            f"chose {r['chosen']} for {r['layer']} (strict mode)" for r in res["mismatches"]],
                           "r9k: vLLM did not make the requested kernel choice; refusing to serve")


def not_installed() -> list[str]:
    """The variants chosen fused whose adapter's layer class the built model has none of (the kernel runs
    nowhere; vLLM's own path serves): one line each. vLLM 0.26's Qwen2-MoE, say, builds its router as a plain
    ReplicatedLinear, not the GateLinear the router adapter replaces."""
    from . import dispatch
    from ..registry.manifest import Impl

    table = dispatch.get_table()
    out = []
    for p in (table.plans.values() if table is not None else ()):
        if p.mode == Impl.FUSED and p.pluggable and p.op and p.layers == 0:
            cls = getattr(p.adapter, "vllm_class", None) or p.extension_point
            out.append(f"{p.knob}={p.value}: the model built no {cls} layer ({p.extension_point}), so {p.op} "
                       "runs nowhere and vLLM's own path serves")
    return out


def _wrap(module, cls_name: str) -> None:
    cls = getattr(module, cls_name, None)
    orig = cls.__dict__.get(HOOKED) if cls is not None else None
    if orig is None or getattr(orig, "_r9k_choices", False):
        return

    def load_model(self, *a, **k):
        out = orig(self, *a, **k)
        if not getattr(self, "_r9k_choices_read", False):  # a subclass calling its parent's: read once
            self._r9k_choices_read = True
            on_model_built(self)
        return out

    load_model._r9k_choices = True  # type: ignore[attr-defined]
    load_model.__wrapped__ = orig  # type: ignore[attr-defined]
    cls.load_model = load_model


def install_hooks() -> None:
    """Wrap the model runners' ``load_model`` (post-import hooks: nothing of vLLM is imported here)."""
    for mod, cls in RUNNERS:
        HOOKS.add(mod, lambda module, cls=cls: _wrap(module, cls))
