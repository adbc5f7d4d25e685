"""Verdicts (PASS / MISS / unmeasured) and Markdown rendering."""

import datetime
import hashlib
import os
import platform
import subprocess

import torch

from .systems import LONG, LONG_TARGETS, STOCK, is_windowed, memory_target
from .timing import MAX_SPREAD, target_status, fmt_ratio


def verdicts(report, targets) -> dict:
    """PASS / MISS per system and target; a speed ratio whose per-round spread exceeds
    +-3 % is "unmeasured" (never PASS/MISS). Memory ratios (peaks, no timing noise) are
    judged directly."""
    import fnmatch

    v = {}
    paths = {s["name"]: s.get("attention_paths") for s in report["systems"]}
    train = report.get("train", {}).get("systems", {})
    for name, e in train.items():
        if name == STOCK:
            continue
        item = {"speed_target": targets.get(name), "speed": target_status(e["ratio"], targets.get(name))}
        fused = bool(paths.get(name)) and paths[name]["explicit"] == 0
        mt = memory_target(name, fused)
        item["memory_target"] = mt
        item["memory"] = "n/a" if mt is None else ("PASS" if e["mem_ratio"] <= mt else "MISS")
        v[name] = item
    sweep = report.get("sweep", {}).get("lengths", {})
    for L, entry in sweep.items():
        if int(L) < LONG:
            continue
        for name, e in entry.get("systems", {}).items():
            if name == STOCK:
                continue
            if is_windowed(name):
                v.setdefault(name, {})[f"long_{L}"] = target_status(e["ratio"], 1.0)
            for pattern, at, speed, mem in LONG_TARGETS:
                if int(L) == at and fnmatch.fnmatchcase(name, pattern):
                    v.setdefault(name, {})[f"long_{L}"] = target_status(e["ratio"], speed)
                    v[name][f"long_{L}_memory"] = "PASS" if e["mem_ratio"] <= mem else "MISS"
    return v


def meta(device, preset, dtype, mode, cfg) -> dict:
    import fairseq

    m = {"date": datetime.date.today().isoformat(), "device": str(device), "preset": preset,
         "dtype": dtype, "mode": mode, "torch": torch.__version__, "fairseq": fairseq.__version__,
         "python": platform.python_version(), "machine": platform.machine(),
         "cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
         "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()}}
    if device.type == "cuda":
        m["gpu"] = torch.cuda.get_device_name(device)
        m["cuda"] = torch.version.cuda
    return m


#: the repository root (the folder holding the packages)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the folders of the repository whose sources the hash covers (those present)
SOURCE_FOLDERS = ("fairseq_attn_core", "fairseq_attn_plugins", "fairseq_attn_recipes",
                  "fairseq_attn_records", "fairseq_attn_reports", "benchmarks", "scripts", "tests")


def sources_hash(root: str = ROOT) -> str:
    """sha256 (16 hex digits) over the path and bytes of every ``.py`` / ``.sh`` file in the
    :data:`SOURCE_FOLDERS` of ``root`` (hidden folders skipped): names the code measured
    where ``.git`` is absent (the device tool copies the working tree)."""
    h = hashlib.sha256()
    walks = (os.walk(os.path.join(root, top)) for top in SOURCE_FOLDERS)
    for folder, dirs, files in (item for walk in walks for item in walk):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for f in sorted(files):
            if f.endswith((".py", ".sh")):
                path = os.path.join(folder, f)
                h.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as fh:
                    h.update(fh.read() + b"\0")
    return h.hexdigest()[:16]


def provenance(root: str = ROOT) -> dict:
    """The code measured: the git commit (``None`` without ``.git``), whether tracked files
    differ from it, and the sources hash (always)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)

    commit, dirty = None, None
    try:
        r = git("rev-parse", "HEAD")
        if r.returncode == 0:
            commit = r.stdout.strip()
            dirty = bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return {"commit": commit, "commit_dirty": dirty, "sources_sha256": sources_hash(root)}


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------
def _fmt(x, nd=2):
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def render(report: dict) -> str:
    """Markdown tables of absolute figures, ratios to stock fairseq and verdicts."""
    m = report["meta"]
    if "scaling" in report:
        return render_scaling(report)
    lines = [f"### {m['preset']} preset, {m['dtype']} on {m.get('gpu', m['device'])} "
             f"(torch {m['torch']}, fairseq {m['fairseq']}, {m['date']}, "
             f"commit {(m.get('commit') or 'none')[:10]}, sources {m.get('sources_sha256')})", ""]
    errs = [s for s in report["systems"] if "error" in s]
    for s in errs:
        lines.append(f"- **{s['name']}** could not be built: {s['error']}")
    for s in report["systems"]:
        if "same_paths_as" in s:
            lines.append(f"- {s['name']}: its layers take the same paths as {s['same_paths_as']}'s "
                         f"at every measured shape; measured once")
    v = report.get("verdicts", {})
    tr, inf = report.get("train"), report.get("infer")
    if tr:
        lines += [f"Training: {tr['batches']} batches x update-freq {tr.get('update_freq', 1)}, "
                  f"{tr['tokens_per_pass']} target tokens per pass, {tr['passes']} pass(es) per "
                  f"measurement, {tr['repeats']} interleaved rounds, timed by {tr.get('timer', '?')}; "
                  f"ratio = median of per-round ratios to stock fairseq +- their spread (half the "
                  f"range); a ratio spread beyond +-{100 * MAX_SPREAD:.0f}% is unmeasured.", ""]
        base = tr.get("baseline")
        if base:
            lines += [f"vs {base}: the same per-round ratio to {base} (the Table 1 rows' baseline, "
                      f"transformer_attn_wmt_en_de).", ""]
        data = m.get("data")
        if data:
            lines += [f"Vocabularies {data['vocab']['source']} / {data['vocab']['target']} (source / target), "
                      f"lengths {data['lengths']}"
                      + (f", from {data['data_bin']} ({data['pair']})" if data.get("data_bin") else "")
                      + f"; {m['threads']} CPU thread(s).", ""]
        head = ("| system | train tok/s | ratio +-spread |" + (f" vs {base} +-spread |" if base else "")
                + " target | speed | peak MB | mem ratio | mem |")
        sep = "|---|---:|---|" + ("---|" if base else "") + "---:|---|---:|---:|---|"
        if inf:
            head += " infer sent/s | infer ratio |"
            sep += "---:|---:|"
        lines += [head, sep]
        for name, e in tr["systems"].items():
            r = e["ratio"]
            vv = v.get(name, {})
            row = (f"| {name} | {e['tokens_per_s']['median']:.0f} | "
                   f"{fmt_ratio(r)} | " + (f"{fmt_ratio(e['ratio_to_baseline'])} | " if base else "") +
                   f"{_fmt(vv.get('speed_target'))} | {vv.get('speed', 'reference')} | "
                   f"{e['peak_mem_mb']:.0f} | {e['mem_ratio']:.3f} | {vv.get('memory', 'reference')} |")
            if inf:
                ie = inf["systems"][name]
                row += f" {ie['sentences_per_s']['median']:.1f} | {fmt_ratio(ie['ratio'])} |"
            lines.append(row)
        lines.append("")
    sw = report.get("sweep")
    if sw:
        lengths = list(sw["lengths"])
        names = []
        for e in sw["lengths"].values():
            names += [n for n in [*e.get("systems", {}), *e.get("failed", {})] if n not in names]
        lines += [f"Encoder-only length sweep (forward + backward, {sw['tokens_per_batch']} tokens "
                  f"per batch): throughput ratio to stock fairseq (median +-spread) / activation "
                  f"memory ratio.",
                  "", "| system | " + " | ".join(f"L={L}" for L in lengths) + " |",
                  "|---|" + "---|" * len(lengths)]
        for name in names:
            cells = []
            for L in lengths:
                e = sw["lengths"][L].get("systems", {}).get(name)
                f = sw["lengths"][L].get("failed", {}).get(name)
                cells.append(f"{e['ratio']['median']:.2f} +-{100 * e['ratio']['spread']:.0f}% / "
                             f"{e['mem_ratio']:.2f}" if e else
                             (f.split(":")[0] if f else "-"))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        ref_row = [f"{sw['lengths'][L]['systems'][STOCK]['tokens_per_s']['median']:.0f}"
                   if STOCK in sw["lengths"][L].get("systems", {}) else "-" for L in lengths]
        lines.append("| (stock tok/s) | " + " | ".join(ref_row) + " |")
        if any("time_ratio" in e for x in sw["lengths"].values() for e in x.get("systems", {}).values()):
            lines += ["", f"The same as time ratio to stock (median of per-round ratios +-spread, "
                      f"lower is better) / peak memory ratio ({sw.get('memory', 'peak memory')}).",
                      "", "| system | " + " | ".join(f"L={L}" for L in lengths) + " |",
                      "|---|" + "---|" * len(lengths)]
            for name in names:
                cells = []
                for L in lengths:
                    e = sw["lengths"][L].get("systems", {}).get(name)
                    cells.append(f"{e['time_ratio']['median']:.2f}x +-{100 * e['time_ratio']['spread']:.0f}% / "
                                 f"{e['mem_ratio']:.2f}x" if e else "-")
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
        for name, err in sw.get("build_errors", {}).items():
            lines.append(f"- **{name}** could not be built for the sweep: {err}")
        for L, e in sw["lengths"].items():
            for name, err in e.get("failed", {}).items():
                lines.append(f"- **{name}** failed at L = {L}: {err}")
            ran = [f"{name} {', '.join(f'{p} x{n}' for p, n in x['paths'].items())}"
                   for name, x in e.get("systems", {}).items() if name != STOCK and x.get("paths")]
            if ran:
                lines.append(f"- Encoder layers' paths at L = {L}: " + "; ".join(ran))
        long_v = [f"{n} L={k[5:]}: {s}" for n, vv in v.items() for k, s in vv.items()
                  if k.startswith("long_")]
        if long_v:
            lines += ["", f"Long-sequence targets (windowed faster than dense stock at L >= {LONG}; "
                      f"relpos >= 0.7 and memory <= 1.5 at L = 1024): " + "; ".join(long_v)]
        lines.append("")
    return "\n".join(lines)


def render_numerics(num: dict) -> str:
    lines = [f"fp16 numerics ({num['dtype']} on {num['device']}, tolerance {num['tolerance']}): "
             f"{'all OK' if num['ok'] else 'FAILURES'}", "",
             "| arch | finite | fused vs explicit out / grad | fused vs fp32 out / grad | "
             "explicit vs fp32 out / grad | flex vs explicit out / grad | ok |",
             "|---|---|---|---|---|---|---|"]
    for arch, e in num["archs"].items():
        if "error" in e:
            lines.append(f"| {arch} | error: {e['error']} | | | | | FAIL |")
            continue
        lines.append(
            f"| {arch} | {e['finite']} | {e['fused_vs_explicit_out']:.1e} / {e['fused_vs_explicit_grad']:.1e} | "
            f"{e['fused_vs_fp32_out']:.1e} / {e['fused_vs_fp32_grad']:.1e} | "
            f"{e['explicit_vs_fp32_out']:.1e} / {e['explicit_vs_fp32_grad']:.1e} | "
            + (f"{e['flex_vs_explicit_out']:.1e} / {e['flex_vs_explicit_grad']:.1e} | "
               if "flex_vs_explicit_out" in e else "- (CUDA only) | ")
            + f"{'OK' if e['ok'] else 'FAIL'} |")
    return "\n".join(lines) + "\n"


def render_scaling(report: dict) -> str:
    """Stock base vs big: measured time ratio (spread) next to the FLOP ratio."""
    m, sc = report["meta"], report["scaling"]
    r = sc["time_ratio"]
    sec = sc["seconds"]
    verdict = "unmeasured" if r["spread"] > MAX_SPREAD else (
        f"time / FLOP ratio = {r['median'] / sc['flop_ratio']:.2f}")
    return "\n".join([
        f"### stock base vs big, {m['preset']} preset, {m['dtype']} on {m.get('gpu', m['device'])} "
        f"(torch {m['torch']}, {m['date']})", "",
        "| model | seconds per pass (median +-spread) | training FLOPs per pass |", "|---|---:|---:|",
        f"| base | {fmt_ratio(sec['base'])} | {sc['flops_per_pass']['base']:.3e} |",
        f"| big | {fmt_ratio(sec['big'])} | {sc['flops_per_pass']['big']:.3e} |", "",
        f"time ratio big/base {fmt_ratio(r)} vs FLOP ratio {sc['flop_ratio']:.3f}: {verdict}", ""])
