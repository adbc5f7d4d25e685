"""What a trained run's position parameters learned, and how training treats them.

Reads a run folder's checkpoints (``checkpoint<N>.pt``, ``checkpoint_<E>_<U>.pt``,
``checkpoint_last.pt``, ``checkpoint_best.pt``: whatever exists) with the package's safe
loader (``weights_only=True``) and reports, for the position parameters (T5's bias tables
``bucket_bias``; relpos's ``rel_keys`` / ``rel_values``; learned position embeddings; or
none: sinusoidal or no token positions, said):

* per table and checkpoint: its root mean square, the largest change of a row since the
  first checkpoint, and Adam's stored next step (``update / parameter`` norm, from the saved
  moments) beside the same ratio of every other parameter;
* for the last checkpoint: per head the table's norm, per bucket (row) min, max and std over
  heads, and how many training (query, key) pairs fall into each bucket (0: never reached,
  so never trained), from the training split's lengths in BPE tokens (EOS included);
* with ``--splits``: the share of an evaluation split's (query, key) pairs that fall into
  buckets training never reaches;
* on a few real training batches (dropout off, one forward and backward each, nothing
  updated): per self-attention layer and head the std of the content logits
  ``q.k / sqrt(d)`` and of the T5 bias over the valid (query, key) pairs and their ratio;
  per parameter group the gradient norm (as fairseq-train scales it: by 1 / sample size)
  and the step Adam would take from the checkpoint's saved moments with that gradient,
  as ``update norm / parameter norm``; and how well a linear probe reads each token's
  position in its sentence from the encoder's output and the decoder's last hidden state
  (what cross-attention can align by when no token positions are added).

Usage::

    python benchmarks/diagnostics/position_params.py RUN_DIR [--data DATA_BIN]
        [--checkpoint checkpoint_last.pt] [--batches 4] [--splits test,concat/k4.test] [--json OUT.json]

``--data`` defaults to the data folder the checkpoint records. Prints text tables; ``--json``
writes every number.
"""

import argparse
import json
import math
import os
import sys
from typing import Dict, List, Optional

import numpy as np
import torch

from fairseq_attn_records import run_record

POSITION_KEYS = ("bucket_bias", "rel_keys", "rel_values", "embed_positions.weight")


def checkpoint_files(run_dir: str) -> List[str]:
    """The run's checkpoints: numbered ones by number, then ``_last``, ``_best``."""
    numbered = []
    for name in os.listdir(run_dir):
        m = run_record.CHECKPOINT_NAME.fullmatch(name)  # the run record's names of a run's checkpoints
        if m and name != "checkpoint_last.pt":
            order = (int(m.group(1)), 0) if m.group(1) else (int(m.group(2)), int(m.group(3)))
            numbered.append((order, name))
    names = [n for _, n in sorted(numbered)]
    names += [n for n in ("checkpoint_last.pt", "checkpoint_best.pt")
              if os.path.isfile(os.path.join(run_dir, n))]
    if not names:
        raise SystemExit(f"error: {run_dir}: no checkpoint*.pt in this folder")
    return [os.path.join(run_dir, n) for n in names]


def position_tensors(state_dict) -> Dict[str, torch.Tensor]:
    return {k: v for k, v in state_dict.items() if k.endswith(POSITION_KEYS)}


def table_summary(table: torch.Tensor) -> Dict[str, list]:
    """(rows, cols) table: per column (head) norm; per row (bucket) min, max, std over columns."""
    t = table.double()
    return {"col_norm": t.norm(dim=0).tolist(), "row_min": t.min(dim=1).values.tolist(),
            "row_max": t.max(dim=1).values.tolist(), "row_std": t.std(dim=1, unbiased=False).tolist()}


def adam_update(param, grad, state, group) -> torch.Tensor:
    """The step fairseq's Adam (``fairseq.optim.adam``) takes from ``state`` with ``grad``
    (``grad`` None: the saved moments' own next step, no new gradient)."""
    if group.get("amsgrad"):
        raise SystemExit("error: the checkpoint's Adam uses amsgrad, which this diagnostic does not model")
    b1, b2 = group["betas"]
    step = int(state["step"]) if state else 0
    m = state["exp_avg"].double() if state else torch.zeros_like(param, dtype=torch.float64)
    v = state["exp_avg_sq"].double() if state else torch.zeros_like(param, dtype=torch.float64)
    if grad is not None:
        g = grad.double()
        m, v, step = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g, step + 1
    step_size = group["lr"] * math.sqrt(1 - b2 ** step) / (1 - b1 ** step)
    update = step_size * m / (v.sqrt() + group["eps"])
    if group["weight_decay"]:
        update = update + group["weight_decay"] * group["lr"] * param.double()
    return update


def group_of(name: str) -> str:
    """The parameter group a name belongs to (position tables on their own)."""
    if name.endswith(POSITION_KEYS):
        return name
    if "embed_tokens" in name or "output_projection" in name:
        return "token embeddings"
    if "layer_norm" in name:
        return "layer norms"
    if "attn." in name:
        return "attention projections"
    if ".fc1." in name or ".fc2." in name:
        return "feed-forward"
    return "other"


def saved_steps(state: dict, names: List[str]) -> Dict[str, float]:
    """Per group: ``||update|| / ||param||`` of Adam's next step from the saved moments."""
    opt = state.get("last_optimizer_state")
    if not opt or not opt.get("state"):
        return {}
    group = opt["param_groups"][0]
    sums: Dict[str, List[float]] = {}
    for i, name in enumerate(names):
        p = state["model"][name]
        u = adam_update(p, None, opt["state"].get(i), group)
        s = sums.setdefault(group_of(name), [0.0, 0.0])
        s[0] += float(u.pow(2).sum())
        s[1] += float(p.double().pow(2).sum())
    return {g: math.sqrt(u / p) for g, (u, p) in sums.items()}


def over_training(files: List[str], names: List[str], loaded: Dict[str, dict]) -> List[dict]:
    """``loaded``: states read before, by path (each file is read once)."""
    from fairseq_attn_plugins.checkpoint_safety import safe_load
    rows, first = [], None
    for f in files:  # numbered ones in the order of their updates, then _last and _best
        state = loaded.get(os.path.realpath(f)) or safe_load(f)
        tables = position_tensors(state["model"])
        if first is None:
            first = {k: v.double() for k, v in tables.items()}
        steps = saved_steps(state, names)
        rows.append({
            "checkpoint": os.path.basename(f),
            "num_updates": state["optimizer_history"][-1]["num_updates"],
            "tables": {k: {"rms": float(v.double().pow(2).mean().sqrt()),
                           "max_row_change": (v.double() - first[k]).abs().amax(dim=-1).tolist()}
                       for k, v in tables.items()},
            "adam_step_ratio": steps,
        })
    named = [r for r in rows if r["checkpoint"] in ("checkpoint_last.pt", "checkpoint_best.pt")]
    return sorted((r for r in rows if r not in named), key=lambda r: r["num_updates"]) + named


def pair_counts(lengths, buckets_of, causal: bool) -> Dict[int, int]:
    """How many (query, key) pairs of sentences of ``lengths`` fall into each bucket;
    ``buckets_of(rel)`` maps key - query distances (long tensor) to buckets."""
    lengths = np.asarray(lengths, dtype=np.int64)
    longest = int(lengths.max())
    rel = torch.arange(-(longest - 1), longest)
    bucket = buckets_of(rel).tolist()
    # a sentence of length L holds L - |d| pairs at distance d
    per_len = np.bincount(lengths, minlength=longest + 1)
    counts: Dict[int, int] = {}
    for d, b in zip(rel.tolist(), bucket):
        if causal and d > 0:
            continue
        n = int(sum(int(c) * (L - abs(d)) for L, c in enumerate(per_len) if c and L > abs(d)))
        counts[b] = counts.get(b, 0) + n
    return counts


def unreached_share(task, split: str, model, reach: Dict[str, List[int]]) -> dict:
    """Per table: the share of ``split``'s (query, key) pairs in buckets training never reaches."""
    ds = task.dataset(split)
    out = {"src_max": int(ds.src_sizes.max()), "tgt_max": int(ds.tgt_sizes.max())}
    for side, i, _attn, piece in pieces_of(model, "t5bias"):
        if f"{side}.{i}" in reach:
            sizes = ds.src_sizes if side == "encoder" else ds.tgt_sizes
            counts = pair_counts(sizes, piece.bucket, causal=(side == "decoder"))
            never = sum(n for b, n in counts.items() if reach[f"{side}.{i}"][b] == 0)
            out[f"{side}.{i}"] = never / sum(counts.values())
    return out


def pieces_of(model, name):
    """(side, layer, attention module, piece or None) of every self-attention layer."""
    out = []
    for side in ("encoder", "decoder"):
        for i, layer in enumerate(getattr(model, side).layers):
            attn = layer.self_attn
            piece = next((p for p in getattr(attn, "pieces", []) if p.name == name), None)
            out.append((side, i, attn, piece))
    return out


class LogitStats:
    """Pooled std per head of content logits and T5 bias over valid (query, key) pairs."""

    def __init__(self):
        self.acc: Dict[tuple, np.ndarray] = {}  # key -> [n, sum, sumsq] per head, x2 (logit, bias)

    def add(self, key, logits: torch.Tensor, bias: Optional[torch.Tensor], valid: torch.Tensor):
        """logits (B, H, T, S), bias (H, T, S) or None, valid (B, T, S) bool."""
        H = logits.size(1)
        acc = self.acc.setdefault(key, np.zeros((2, 3, H)))
        w = valid[:, None].expand_as(logits).double()
        for slot, x in ((0, logits.double()),
                        (1, None if bias is None else bias.double()[None].expand_as(logits))):
            if x is None:
                continue
            acc[slot, 0] += w.sum(dim=(0, 2, 3)).numpy()
            acc[slot, 1] += (x * w).sum(dim=(0, 2, 3)).numpy()
            acc[slot, 2] += (x * x * w).sum(dim=(0, 2, 3)).numpy()

    def result(self):
        out = {}
        for key, acc in self.acc.items():
            std = []
            for slot in (0, 1):
                n, s, ss = acc[slot]
                std.append(np.sqrt(np.maximum(ss / np.maximum(n, 1) - (s / np.maximum(n, 1)) ** 2, 0))
                           if n.any() else None)
            logit, bias = std
            out["%s.%d" % key] = {"logit_std": logit.tolist(),
                                  "bias_std": None if bias is None else bias.tolist(),
                                  "ratio": None if bias is None else (bias / logit).tolist()}
        return out


def attention_logits(model, batches, piece_name="t5bias") -> dict:
    """Per self-attention layer and head: std of ``q.k / sqrt(d)`` and of the bias (dropout off)."""
    stats = LogitStats()
    hooks = []
    for side, i, attn, piece in pieces_of(model, piece_name):
        def hook(mod, args, kwargs, _out, side=side, i=i, piece=piece):
            x = args[0] if args else kwargs["query"]
            kpm = kwargs.get("key_padding_mask")
            T, B, _ = x.shape
            H, D = mod.num_heads, mod.head_dim
            q = mod.q_proj(x).view(T, B, H, D).permute(1, 2, 0, 3)
            k = mod.k_proj(x).view(T, B, H, D).permute(1, 2, 0, 3)
            logits = (q @ k.transpose(-1, -2)) * D ** -0.5
            pad = kpm.bool() if kpm is not None else torch.zeros(B, T, dtype=torch.bool)
            valid = ~pad[:, :, None] & ~pad[:, None, :]
            if side == "decoder":
                valid = valid & torch.ones(T, T, dtype=torch.bool).tril()[None]
            bias = None
            if piece is not None:
                pos = torch.arange(T)
                bias = piece.table()[piece.bucket(pos[None, :] - pos[:, None])].permute(2, 0, 1)
            stats.add((side, i), logits.detach(), None if bias is None else bias.detach(), valid)
        hooks.append(attn.register_forward_hook(hook, with_kwargs=True))
    model.eval()
    try:
        with torch.no_grad():
            for sample in batches:
                model(**sample["net_input"])
    finally:
        for h in hooks:
            h.remove()
    return stats.result()


RIDGE = 1.0


def ridge_r2(x: torch.Tensor, y: torch.Tensor, fit: torch.Tensor) -> float:
    """R^2 on the rows not in ``fit`` of a ridge regression (penalty RIDGE, intercept free)
    of ``y`` on ``x`` fitted on the rows in ``fit``."""
    x = torch.cat([x.double(), torch.ones(len(x), 1, dtype=torch.float64)], dim=1)
    y = y.double()
    penalty = RIDGE * torch.eye(x.size(1), dtype=torch.float64)
    penalty[-1, -1] = 0
    w = torch.linalg.solve(x[fit].T @ x[fit] + penalty, x[fit].T @ y[fit])
    held = ~fit
    err = y[held] - x[held] @ w
    return float(1 - err.pow(2).sum() / (y[held] - y[held].mean()).pow(2).sum())


def position_probe(model, batches) -> dict:
    """How well a linear map reads each token's position in its sentence (index, and index /
    (length - 1)) from the encoder's output and the decoder's last hidden state: R^2 on the
    odd sentences of a ridge fit on the even ones (dropout off). What cross-attention can
    align by: the encoder adds no token positions when a method drops them."""
    feats = {"encoder": [], "decoder": []}
    model.eval()
    with torch.no_grad():
        for sample in batches:
            net = sample["net_input"]
            enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
            dec, _ = model.decoder(net["prev_output_tokens"], encoder_out=enc, features_only=True)
            for side, h, tokens in (("encoder", enc["encoder_out"][0].transpose(0, 1), net["src_tokens"]),
                                    ("decoder", dec, net["prev_output_tokens"])):
                real = tokens.ne(getattr(model, side).padding_idx)  # (B, T)
                for b in range(tokens.size(0)):
                    n = int(real[b].sum())
                    idx = torch.arange(n, dtype=torch.float64)
                    feats[side].append((h[b][real[b]], idx, idx / max(n - 1, 1)))
    out = {}
    for side, rows in feats.items():
        x = torch.cat([r[0] for r in rows])
        fit = torch.cat([torch.full((len(r[1]),), k % 2 == 0) for k, r in enumerate(rows)])
        out[side] = {"index_r2": ridge_r2(x, torch.cat([r[1] for r in rows]), fit),
                     "fraction_r2": ridge_r2(x, torch.cat([r[2] for r in rows]), fit)}
    return out


def gradients_and_steps(model, criterion, batches, state, names) -> dict:
    """Per group: gradient norm and Adam's ``update / parameter`` norm ratio, mean over batches."""
    opt = state.get("last_optimizer_state") or {}
    # no saved moments (--no-save-optimizer-state): Adam's first step at the configured lr
    group = (opt.get("param_groups") or [{"lr": float(state["cfg"]["optimization"]["lr"][0]),
                                           "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}])[0]
    params = dict(model.named_parameters())
    trained = [n for n in names if params[n].requires_grad]
    per_batch = []
    model.eval()
    for sample in batches:
        model.zero_grad()
        loss, sample_size, _ = criterion(model, sample)
        loss.backward()
        sums: Dict[str, List[float]] = {}
        for i, n in enumerate(trained):
            p = params[n]
            g = p.grad.double() / sample_size if p.grad is not None else torch.zeros_like(p, dtype=torch.float64)
            u = adam_update(p.detach(), g, (opt.get("state") or {}).get(i), group)
            s = sums.setdefault(group_of(n), [0.0, 0.0, 0.0, 0])
            s[0] += float(g.pow(2).sum())
            s[1] += float(u.pow(2).sum())
            s[2] += float(p.detach().double().pow(2).sum())
            s[3] += p.numel()
        per_batch.append({k: (math.sqrt(g), math.sqrt(u / pn), math.sqrt(u / m), math.sqrt(pn / m))
                          for k, (g, u, pn, m) in sums.items()})
    model.zero_grad()
    fields = ("grad_norm", "step_ratio", "update_rms", "param_rms")
    return {k: {f: float(np.mean([b[k][j] for b in per_batch])) for j, f in enumerate(fields)}
            for k in per_batch[0]}


def training_cap(run_dir: str) -> Optional[int]:
    """The recipe's cap on training source words (``TRAIN_MAX_LEN`` of the data its run record
    names), if any; a broken record is an error."""
    rec = run_record.load(run_dir) or {}
    cap = ((rec.get("data") or {}).get("settings") or {}).get("TRAIN_MAX_LEN")
    return int(cap) if cap else None


def training_batches(task, cfg, n: int, seed: int = 1):
    task.load_dataset("train", combine=False, epoch=1)
    itr = task.get_batch_iterator(
        dataset=task.dataset("train"), max_tokens=cfg.dataset.max_tokens,
        max_sentences=cfg.dataset.batch_size, max_positions=(1024, 1024),
        required_batch_size_multiple=cfg.dataset.required_batch_size_multiple, seed=seed,
        num_workers=0).next_epoch_itr(shuffle=True)
    return [next(itr) for _ in range(n)]


def diagnose(run_dir: str, data: Optional[str] = None, checkpoint: Optional[str] = None,
             n_batches: int = 4, splits=()) -> dict:
    from fairseq_attn_plugins.loading import load_checkpoint_to_cpu, load_model_ensemble_and_task

    files = checkpoint_files(run_dir)
    path = os.path.join(run_dir, checkpoint) if checkpoint else (
        os.path.join(run_dir, "checkpoint_last.pt") if os.path.isfile(os.path.join(run_dir, "checkpoint_last.pt"))
        else files[-1])
    overrides = {"data": data} if data else {}
    state = load_checkpoint_to_cpu(path, overrides)  # read once: the model, its tables and Adam's moments
    models, cfg, task = load_model_ensemble_and_task([path], arg_overrides=overrides, state=state)
    model = models[0].float()
    for split in splits:
        try:
            task.load_dataset(split, combine=False, epoch=1)
        except FileNotFoundError:
            raise SystemExit(f"error: --splits: no split {split!r} in {task.cfg.data}") from None
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    margs = cfg.model
    tables = position_tensors(state["model"])
    report = {
        "run": run_dir, "checkpoint": os.path.basename(path), "arch": margs.arch,
        "optimizer_state": bool((state.get("last_optimizer_state") or {}).get("state")),
        "token_positions": ("none" if margs.no_token_positional_embeddings else
                            "learned" if margs.encoder_learned_pos else "sinusoidal"),
        "tables": {k: table_summary(v) for k, v in tables.items()},
        "over_training": over_training(files, names, {os.path.realpath(path): state}),
    }
    batches = training_batches(task, cfg, n_batches)
    ds = task.dataset("train")
    report["lengths"] = {"cap_words": training_cap(run_dir), "src_max": int(ds.src_sizes.max()), "src_p95": float(np.percentile(ds.src_sizes, 95)),
                         "tgt_max": int(ds.tgt_sizes.max()), "tgt_p95": float(np.percentile(ds.tgt_sizes, 95)),
                         "sentences": int(len(ds.src_sizes))}
    reach = {}
    for side, i, _attn, piece in pieces_of(model, "t5bias"):
        if piece is not None and piece.bucket_bias is not None:
            sizes = ds.src_sizes if side == "encoder" else ds.tgt_sizes
            counts = pair_counts(sizes, piece.bucket, causal=(side == "decoder"))
            reach[f"{side}.{i}"] = [counts.get(b, 0) for b in range(piece.num_buckets)]
    report["bucket_pairs"] = reach
    report["splits"] = {split: unreached_share(task, split, model, reach) for split in splits}
    report["logits"] = attention_logits(model, batches)
    report["position_probe"] = position_probe(model, batches)
    criterion = task.build_criterion(cfg.criterion)
    report["gradients"] = gradients_and_steps(model, criterion, batches, state, names)
    return report


def _fmt(xs, digits=3):
    return " ".join(f"{x:.{digits}f}" for x in xs)


def print_report(r: dict) -> None:
    print(f"run {r['run']} ({r['arch']}), {r['checkpoint']}; token positions: {r['token_positions']}"
          + ("" if r["optimizer_state"] else "; no saved Adam moments: steps are Adam's first"))
    L = r["lengths"]
    cap = f"cap {L['cap_words']} source words (run.json); " if L["cap_words"] else ""
    print(f"training lengths: {cap}in BPE tokens + EOS source max {L['src_max']} (95% {L['src_p95']:.0f}), "
          f"target max {L['tgt_max']} (95% {L['tgt_p95']:.0f}), {L['sentences']} pairs")
    first = r["over_training"][0]["checkpoint"]
    this = next(row for row in r["over_training"] if row["checkpoint"] == r["checkpoint"])
    for name, s in r["tables"].items():
        print(f"\n{name}: per-column norm {_fmt(s['col_norm'])}")
        pairs = r["bucket_pairs"].get(".".join(name.split(".")[:3:2]), None)
        change = this["tables"][name]["max_row_change"]
        print(f"row   min     max     std   max change since {first}   training pairs")
        for b, (lo, hi, sd) in enumerate(zip(s["row_min"], s["row_max"], s["row_std"])):
            extra = "" if pairs is None else f"{pairs[b]:>10d}"
            print(f"{b:>3} {lo:7.3f} {hi:7.3f} {sd:7.3f} {change[b]:9.2e} {extra}")
    for split, v in r["splits"].items():
        shares = "  ".join(f"{k} {x:.2%}" for k, x in v.items() if "." in k) or "(no T5 bias table)"
        print(f"{split}: source max {v['src_max']}, target max {v['tgt_max']}; pairs in buckets "
              f"training never reaches: {shares}")
    print("\nover training: table rms | Adam step ratio (table / attention projections / feed-forward)")
    for row in r["over_training"]:
        st = row["adam_step_ratio"]
        tabs = "  ".join(f"{k.split('.')[0]} {v['rms']:.3f}" for k, v in row["tables"].items())
        steps = "  ".join(f"{k.split('.')[0] if k.endswith(POSITION_KEYS) else k} {v:.2e}"
                          for k, v in sorted(st.items()))
        print(f"{row['checkpoint']:>22} {row['num_updates']:>6}  {tabs}  | {steps}")
    print("\nself-attention logits (q.k/sqrt(d)) std | bias std | bias / logit, per head")
    for key, v in r["logits"].items():
        line = f"{key:>10}  {_fmt(v['logit_std'])}"
        if v["bias_std"] is not None:
            line += f" | {_fmt(v['bias_std'])} | {_fmt(v['ratio'])}"
        print(line)
    print("\nposition probe (ridge, R^2 on held-out sentences): index | index / (length - 1)")
    for side, v in r["position_probe"].items():
        print(f"{side:>10}  {v['index_r2']:.3f} | {v['fraction_r2']:.3f}")
    print("\ngradient norm (1/sample size), Adam step ||update||/||param||, per-entry rms of update "
          "and parameter, mean over batches")
    for k, v in sorted(r["gradients"].items()):
        print(f"{k:>48}  grad {v['grad_norm']:.3e}  step {v['step_ratio']:.3e}  "
              f"update rms {v['update_rms']:.2e}  param rms {v['param_rms']:.3f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--data", help="binarised data folder (default: the checkpoint's)")
    ap.add_argument("--checkpoint", help="checkpoint file name in RUN_DIR for the model (default: _last)")
    ap.add_argument("--batches", type=int, default=4, help="training batches (default 4)")
    ap.add_argument("--splits", default="",
                    help="comma-separated evaluation splits of the data folder (e.g. test,concat/k4.test): "
                         "the share of their (query, key) pairs in buckets training never reaches")
    ap.add_argument("--json", help="write every number to this file")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.run_dir):
        ap.error(f"RUN_DIR {a.run_dir!r} is not a folder")
    if a.batches < 1:
        ap.error(f"--batches must be >= 1 (got {a.batches})")
    r = diagnose(a.run_dir, a.data, a.checkpoint, a.batches, [x for x in a.splits.split(",") if x])
    print_report(r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
