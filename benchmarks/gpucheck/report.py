"""The GPU check's markdown summary, rendered from its JSON report (and nothing else)."""

from __future__ import annotations


def _f(x, fmt: str = ".3g") -> str:
    return "" if x is None else format(x, fmt)


def _head(sec: dict, title: str) -> list[str]:
    lines = ["", f"## {title}", "", f"status: **{sec.get('status')}**"
             + (f" in {sec['seconds']:.0f} s" if "seconds" in sec else "")
             + (f"; device {sec['device']}" if "device" in sec else "")]
    if sec.get("error"):
        lines.append(f"error: `{sec['error']}`")
    if sec.get("stopped"):
        lines.append(f"stopped: {sec['stopped']}")
    if sec.get("measured_by"):
        mb = sec["measured_by"]
        lines += [f"measured by: {mb}"] if isinstance(mb, str) else [f"measured by ({k}): {v}" for k, v in mb.items()]
    for key in ("note", "model", "seq_len_note"):
        if sec.get(key):
            lines.append(f"{key.replace('_', ' ')}: {sec[key]}")
    return lines


def _table(sec: dict, header, key_cells, figure_cells) -> list[str]:
    """A markdown table of ``sec``'s rows: each row's key cells, then its figures or its error."""
    lines = ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in sec.get("rows", []):
        keys = key_cells(r)
        cells = [f"error: `{r['error']}`", *[""] * (len(header) - len(keys) - 1)] if "error" in r else figure_cells(r)
        lines.append("| " + " | ".join(str(c) for c in [*keys, *cells]) + " |")
    return lines


def correctness(sec: dict) -> list[str]:
    lines = _head(sec, "1. Correctness: local vs packed, device vs CPU")
    for kind, t in (sec.get("tolerance") or {}).items():
        lines.append(f"- tolerance {kind}: loss rel <= {t['loss_rel']:g}, metric abs <= {t['metric_abs']:g} "
                     f"({t['why']})")
    header = ("model", "method", "packed vs local: loss rel, metric diff, TFLOPs equal", "pass",
              "device vs CPU: loss rel, metric diff, TFLOPs rel", "pass")

    def figures(r):
        p, d = r["packed_vs_local"], r.get("device_vs_cpu")
        dev = ("not run (CPU check)", "") if d is None else (
            f"{d['loss_rel_max']:.2g}, {d['metric_abs']:.3g}, {d['tflops_rel']:.2g}", "yes" if d["pass"] else "**NO**")
        return [f"{p['loss_rel_max']:.2g}, {p['metric_abs']:.3g}, {p['tflops_rel'] == 0}",
                "yes" if p["pass"] else "**NO**", *dev]
    return lines + _table(sec, header, lambda r: [r["model"], r["method"]], figures)


def speed(sec: dict) -> list[str]:
    lines = _head(sec, "2. Speed: packed vs local client-steps/s")
    if "batch_size" in sec:
        lines.append(f"fedavg, batch {sec['batch_size']} x {sec['seq_len']} tokens, {sec['local_steps']} local "
                     f"steps, median of {sec['repeats']} timed rounds after a warm-up round")
    for label, about in (sec.get("models") or {}).items():
        lines.append(f"- {label}: {about}")
    return lines + _table(sec, ("model", "precision", "K", "local", "packed", "packed / local"),
                          lambda r: [r["model"], r["precision"], r["k"]],
                          lambda r: [f"{r['local_steps_per_s']:.1f}", f"{r['packed_steps_per_s']:.1f}",
                                     f"{r['ratio']:.2f}x"])


def cost(sec: dict) -> list[str]:
    lines = _head(sec, "3. Cost per step at Fed-HeLLo's shape")
    if "batch_size" in sec:
        lines.append(f"batch {sec['batch_size']} x {sec['seq_len']} tokens, LoRA {sec['lora']}")
    lines += ["", "| method | tier | layer budget | rank budget | run TFLOPs fwd / bwd | run peak GB | run accounted GB | "
              "plan trained layers | plan TFLOPs fwd / bwd | plan accounted GB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sec.get("rows", []):
        for t, f in r.get("tiers", {}).items():
            run, plan = f["run"], f["plan"]
            lines.append(f"| {r['method']} | {t} | {run['layers']} | {run['rank']} | {_f(run['tflops_forward'])} / "
                         f"{_f(run['tflops_backward'])} | {_f(run['peak_mem_gb'])} ({r['peak_mem_source']}) | "
                         f"{_f(run['accounted_gb'])} | {_f(plan.get('trained_layers'), 'd')} | "
                         f"{_f(plan.get('tflops_forward'))} / {_f(plan.get('tflops_backward'))} | "
                         f"{_f(plan.get('accounted_gb'))} |")
    lines += ["", "Averages over clients (tiers weighted by the RoC, clients that take no part left out) beside the "
              "paper's:", "", "| method | RoC | backward TFLOPs/step: run / plan / paper | GB: run peak / plan "
              "accounted / paper |", "|---|---|---|---|"]
    for r in sec.get("rows", []):
        if "error" in r:
            lines.append(f"| {r['method']} | | error: `{r['error']}` | |")
        for roc, a in r.get("vs_paper", {}).items():
            lines.append(f"| {r['method']} | {roc} | {_f(a['run_tflops_backward'])} / {_f(a['plan_tflops_backward'])} "
                         f"/ {_f(a['paper_tflops_backward'])} | {_f(a['run_peak_mem_gb'])} / "
                         f"{_f(a['plan_accounted_gb'])} / {_f(a['paper_gb'])} |")
    return lines


def slice_(sec: dict) -> list[str]:
    lines = _head(sec, "4. A slice of real work: the licenses evidence preset's fed_hello run")
    if sec.get("preset"):
        lines.append(f"preset {sec['preset']}; committed record: {sec.get('committed_record')}")
    rows = [(k, sec[k]) for k in ("here", "committed") if k in sec]
    if rows:
        lines += ["", "| run | device | rounds | s/round (no eval) | s/client step | eval s/round | final metric |",
                  "|---|---|---|---|---|---|---|"]
        for k, c in rows:
            lines.append(f"| {k} | {c['device']} ({c['env'].get('gpu')}) | {c['rounds']} | {_f(c['seconds_per_round'])} | "
                         f"{_f(c['seconds_per_client_step'])} | {_f(c['eval_seconds_per_round'])} | {_f(c['metric'])} |")
    if "speedup_seconds_per_round" in sec:
        lines.append(f"\nspeed-up over the committed record: {sec['speedup_seconds_per_round']:.2f}x per round, "
                     f"{sec['speedup_seconds_per_client_step']:.2f}x per client step; stopped by: {sec.get('stopped_by')}")
    if sec.get("train_loss_rel_vs_committed") is not None:
        lines.append(f"largest relative difference of a round's training loss from the committed record's: "
                     f"{sec['train_loss_rel_vs_committed']:.2g}")
    return lines


def budget(sec: dict) -> list[str]:
    lines = _head(sec, "5. Budget")
    lines.append(f"budget {sec.get('budget_s'):.0f} s, wall {_f(sec.get('wall_s'), '.0f')} s, finished: "
                 f"{sec.get('finished', False)}")
    lines.append(f"H100 estimates ({sec.get('estimate_note')}): "
                 + ", ".join(f"{k} {v} s" for k, v in sec.get("estimate_h100_s", {}).items()))
    lines.append("spent: " + ", ".join(f"{k} {v:.0f} s" for k, v in sec.get("spent_s", {}).items()))
    for k, v in sec.get("stopped_sections", {}).items():
        lines.append(f"- {k} stopped: {v}")
    return lines


def render(report: dict) -> str:
    env = report.get("environment", {})
    s = report["sections"]
    lines = [f"# GPU check: {env.get('gpu', report['device'])}", "",
             f"`{report['command']}` at {report['created_at']}; figures measured on: **{report['figures_on']}**",
             f"torch {env.get('torch')} (CUDA {env.get('cuda')}), transformers {env.get('transformers')}, peft "
             f"{env.get('peft')}; TF32 matmul {env.get('allow_tf32_matmul')}; commit {env.get('git_commit')}"
             f"{' (dirty)' if env.get('git_dirty') else ''}"]
    for k, v in (report.get("inputs") or {}).items():
        lines.append(f"- {k}: {v}")
    for name, fn in (("correctness", correctness), ("speed", speed), ("cost", cost), ("slice", slice_),
                     ("budget", budget)):
        sec = s.get(name, {"status": "missing"})
        try:
            lines += fn(sec)
        except (KeyError, TypeError, ValueError) as e:  # a half-written section: say so, keep the rest
            lines += _head(sec, name) + [f"(summary of this section could not be rendered: {type(e).__name__}: {e})"]
    return "\n".join(lines) + "\n"


__all__ = ["render"]
