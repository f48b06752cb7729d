"""Text tables of a decode-step result, and the release records it can become."""
from __future__ import annotations


def _f(v, nd=2):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _table(cols, rows) -> str:
    w = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    line = lambda cells: "  ".join(c.ljust(w[i]) for i, c in enumerate(cells))  # noqa: E731
    return "\n".join([line(cols), line(["-" * x for x in w])] + [line(r) for r in rows])


def render(res: dict) -> str:
    out = [f"decode step: {res['config']} on {res.get('gpu') or res['device']}, context {res['context']} tokens, "
           f"MTP-3 (4 tokens a request); torch {res.get('torch')}, triton {res.get('triton')}"]
    for name, p in res["profiles"].items():
        fused = [o["op"] for o in p["ops"] if o["impl"] == "fused"]
        peer = [o["op"] for o in p["ops"] if o["impl"] == "stock:vllm"]
        out.append(f"  {name} ({p.get('hash')}): fused {', '.join(fused) or 'none'}"
                   + (f"; vLLM's own kernels: {', '.join(peer)}" if peer else "")
                   + ("; stock paths: the op table's plain compositions" if p.get("stock") == "plain" else ""))
        if p.get("note"):
            out.append(f"    ({p['note']})")
    if res.get("stock_source"):
        out += ["", "stock of each op (what stock@vllm runs; 'stand-in' where vLLM's path is compiled code or not loaded):"]
        out.append(_table(["op", "stock", "what runs as stock"],
                          [[op, "vLLM's path" if v["kind"] == "vllm" else "stand-in", v["text"]]
                           for op, v in res["stock_source"].items()]))
    out += ["", "checks (relative L2 of the step output):"]
    out.append(_table(["requests", "what", "rel_l2", "tol", "ok"],
                      [[str(c["requests"]), c["what"], f"{c['rel_l2']:.2e}",
                        f"{c['tol']:.0e}" if c.get("tol") is not None else "-", str(c["ok"])]
                       for c in res["checks"]]))
    notes = {}  # each note once, with the first check that has it
    for c in res["checks"]:
        if c.get("note"):
            notes.setdefault(c["note"], c["what"])
    out += [f"  note ({what}): {note}" for note, what in notes.items()]
    out.append("")
    rows = [[str(r["requests"]), str(r["M"]), r["profile"], _f(r.get("ms"), 3),
             f"{_f(r.get('p10'), 3)}-{_f(r.get('p90'), 3)}" if "ms" in r else "-",
             _f((r.get("graph") or {}).get("nodes")), _f((r.get("graph") or {}).get("kernels")), str(r["launch_sites"])]
            for r in res["rows"]]
    out.append(_table(["requests", "M", "profile", "ms/step", "p10-p90", "graph nodes", "kernel nodes",
                       "launch sites"], rows))
    out += [f"  ERROR requests {r['requests']} {r['profile']}: {r['error']}" for r in res["rows"] if r.get("error")]
    out += [f"  requests {q['requests']}: speedup {q['speedup']:.3f}x"
            + (f" over {q['against']}" if q.get("against") else "")
            + (f", nodes {q['nodes_ratio']:.3f} of the baseline's" if q.get("nodes_ratio") else "")
            for q in res.get("ratios", [])]
    out += headline(res)
    first = [r for r in res["rows"] if r["requests"] == res["rows"][0]["requests"] and r.get("launch_parts")]
    if first:
        names = [r["profile"] for r in first]
        out += ["", f"launch sites per part and step (requests {first[0]['requests']}):"]
        keys = sorted({k for r in first for k in r["launch_parts"]},
                      key=lambda k: -max(r["launch_parts"].get(k, 0) for r in first))
        out.append(_table(["part"] + names, [[k] + [str(r["launch_parts"].get(k, 0)) for r in first] for k in keys]))
    parts = [r for r in res["rows"] if r.get("parts")]
    if parts:
        names = [r["profile"] for r in parts]
        out += ["", f"device time per part, ms per step (eager; kernels launched through ATen only: Triton launches "
                    f"are not attributed by the profiler and show ~0), requests {parts[0]['requests']}:"]
        by = {}
        for r in parts:
            for p in r["parts"]:
                by.setdefault(p["part"], {})[r["profile"]] = p["ms"]
        order = sorted(by, key=lambda k: -max(by[k].values()))
        out.append(_table(["part"] + names, [[k] + [_f(by[k].get(n), 3) for n in names] for k in order]))
    if res.get("ablation"):
        out += ["", "ablation (each variant back to stock, one at a time; worth = stock-variant minus profile):"]
        ar = [[a["variant"], a.get("knob", ""), _f(a.get("ms"), 3), _f(a.get("worth_ms"), 3),
               _f((a.get("graph") or {}).get("nodes")), _f(a.get("worth_nodes")), _f(a.get("worth_launch_sites")),
               stock_label(a), a.get("note", "") or a.get("error", "")] for a in res["ablation"]]
        out.append(_table(["variant", "knob", "ms/step", "worth ms", "nodes", "worth nodes", "worth sites",
                           "measured against", "note"], ar))
    if res.get("memory"):
        out += ["", "memory per rank (the registry declares whole-model costs; compared per HC module):"]
        for name, m in res["memory"].items():
            out.append(f"  {name}: weights {m['weight_bytes']:,} bytes")
            for v in m["variants"]:
                if v.get("model_bytes") is None:
                    out.append(f"    {v['variant']}: declared {v['declared_bytes']:,}; {v.get('note')}")
                    continue
                dpm = v.get("declared_per_module")
                out.append(f"    {v['variant']}: model {v['model_bytes']:,} bytes = {v['model_per_module']:,.0f} x "
                           f"{v['model_modules']} modules; declared "
                           + (f"{v['declared_bytes']:,} = {dpm:,.0f} x {v['declared_modules']} modules; "
                              f"agree per module: {v.get('agree')}" if dpm is not None else
                              f"{_f(v.get('declared_bytes'))} (no per-module basis)"))
    out += ["", f"overall: {'OK' if res['ok'] else 'FAILED'} ({res.get('seconds', 0):.0f} s)"]
    return "\n".join(out)


def stock_label(a: dict) -> str:
    """An ablation row's stock, short: "vLLM's path (op)", or the stand-in's label (the text before its ';')."""
    if a.get("stock_kind") == "vllm":
        return f"vLLM's path ({a.get('op')})"
    if a.get("stock_kind") == "stand-in":
        return a.get("stock_source", "").split(";")[0]
    return "" if a.get("variant") == "(profile)" else (a.get("stock_source") or "")


def headline(res: dict) -> list[str]:
    """The speedup twice per request count: over the ops whose stock is vLLM's real path (against the derived
    ``*-real`` baseline) and in total (against the baseline it was derived from, stand-ins included)."""
    derived = {n: p["derived_from"] for n, p in res.get("profiles", {}).items() if p.get("derived_from")}
    if not derived:
        return []
    out = []
    by = {(q["requests"], q["against"]): q for q in res.get("ratios", [])}
    for real, total in derived.items():
        reqs = sorted({q["requests"] for q in res.get("ratios", []) if q["against"] == real})
        for R in reqs:
            a, b = by.get((R, real)), by.get((R, total))
            out.append(f"  headline, requests {R}: {a['speedup']:.3f}x over the ops where vLLM's real path ran "
                       f"({', '.join(res.get('real_vllm_ops', []))}; against {real})"
                       + (f"; {b['speedup']:.3f}x in total (against {total}, stand-ins included)" if b else ""))
    return out


def release_records(res: dict, command: str, platform: str = "h200") -> list[dict]:
    """``[[bench]]`` records (registry BenchRecord fields) for a release file, one config per profile
    (``h200_tp4_shard.<profile>``): ms per step and graph nodes per request count (``@r<requests>``), and the
    speedup over the baseline profile."""
    recs = []
    common = {"stack": "ours", "platform": platform, "command": command, "method": "r9kctl-bench"}
    for r in res["rows"]:
        if "ms" not in r:
            continue
        p = res["profiles"].get(r["profile"]) or {}
        kind = p.get("stock", "vllm")
        stock_note = ("; stock paths: vLLM's real path for " + ", ".join(res.get("real_vllm_ops") or ["?"])
                      + ", labelled stand-ins for the rest (result's stock_source)" if kind == "vllm" and
                      res.get("stock_source") else
                      "; stock paths of the GDN core and the hc combine + norm: vLLM's own kernels" if kind == "vllm"
                      else "; stock paths: the op table's plain compositions (the first runs' measuring stick)")
        if p.get("derived_from"):
            stock_note += f"; {p.get('note')}"
        base = {"config": f"h200_tp4_shard.{r['profile'].replace('@vllm', '').replace('@', '_')}", **common,
                "source": f"r9kctl bench decode-step: one TP4-rank decode step, MTP-3, context {res['context']}, "
                          f"CUDA-graph replay median" + stock_note}
        recs.append({**base, "metric": f"decode_step_ms@r{r['requests']}", "value": round(r["ms"], 3), "unit": "ms"})
        if (r.get("graph") or {}).get("nodes"):
            recs.append({**base, "metric": f"graph_nodes@r{r['requests']}", "value": float(r["graph"]["nodes"]),
                         "unit": "nodes"})
    profiles = list(res["profiles"])
    for q in res.get("ratios", []):
        against = q.get("against", profiles[-1])
        suffix = ("" if against in ("stock", "stock@vllm") else "_real_vllm_ops" if against.endswith("-real")
                  else "_vs_" + against.replace("@", "_"))
        recs.append({"config": f"h200_tp4_shard.{profiles[0]}", **common,
                     "metric": f"decode_step_speedup{suffix}@r{q['requests']}", "value": round(q["speedup"], 3),
                     "unit": "x",
                     "source": f"r9kctl bench decode-step: {profiles[0]} over {against}"})
    return recs


def records_toml(recs: list[dict],
                 keys=("config", "metric", "value", "unit", "stack", "platform", "command", "source", "method")) -> str:
    """``[[bench]]`` tables, one per record, with the fields of ``keys`` in that order (None ones left out)."""
    lines = []
    for r in recs:
        lines.append("[[bench]]")
        for k in keys:
            v = r.get(k)
            if v is None:
                continue
            text = str(v).replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f"{k} = {v!r}" if isinstance(v, (int, float)) else f'{k} = "{text}"')
        lines.append("")
    return "\n".join(lines)
