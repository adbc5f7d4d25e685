"""Identical batches for every system: WMT14-like lengths, fairseq-style batching."""

import numpy as np
import torch

# ---------------------------------------------------------------------------
# Data: WMT-like lengths, fairseq-style batching (max tokens, multiple of 8)
# ---------------------------------------------------------------------------
def wmt_lengths(n: int, rng: np.random.Generator, max_len: int):
    """Source/target lengths in BPE tokens (+ EOS) shaped like WMT14 en-de.

    Log-normal, median ~25 and mean ~30 tokens, long tail, cut at ``max_len``;
    the target is the source length times a log-normal ratio.
    """
    src = np.exp(rng.normal(3.2, 0.6, n))
    tgt = src * np.exp(rng.normal(0.05, 0.15, n))
    clip = lambda a: np.clip(np.rint(a), 1, max_len - 1).astype(int) + 1  # noqa: E731 (+ EOS)
    return clip(src), clip(tgt)


def _collate(pairs, d, device):
    pad, eos = d.pad(), d.eos()
    B = len(pairs)
    S = max(len(s) for s, _ in pairs)
    T = max(len(t) for _, t in pairs)
    src = torch.full((B, S), pad, dtype=torch.long)
    tgt = torch.full((B, T), pad, dtype=torch.long)
    prev = torch.full((B, T), pad, dtype=torch.long)
    for i, (s, t) in enumerate(pairs):
        src[i, S - len(s):] = torch.as_tensor(s)  # left-padded source (fairseq default)
        tgt[i, : len(t)] = torch.as_tensor(t)
        prev[i, 0] = eos
        prev[i, 1: len(t)] = torch.as_tensor(t[:-1])
    lengths = torch.as_tensor([len(s) for s, _ in pairs])
    return {
        "net_input": {"src_tokens": src.to(device), "src_lengths": lengths.to(device),
                      "prev_output_tokens": prev.to(device)},
        "target": tgt.to(device),
        "ntokens": int(sum(len(t) for _, t in pairs)),
        "nsentences": B,
    }


def _sentence(length, d, rng):
    toks = rng.integers(d.nspecial, len(d), size=length).tolist()
    toks[-1] = d.eos()
    return toks


def make_train_batches(d, max_tokens, n_batches, max_len, seed, device):
    """Identical batches for every system: like fairseq's batch_by_size on sorted lengths."""
    rng = np.random.default_rng(seed)
    n = max(64, n_batches * max_tokens // 20)
    src_len, tgt_len = wmt_lengths(n, rng, max_len)
    order = np.lexsort((tgt_len, src_len))
    batches, cur, cur_max = [], [], 0
    for i in order:
        width = max(src_len[i], tgt_len[i], cur_max)
        if cur and width * (len(cur) + 1) > max_tokens:
            keep = max(8, len(cur) // 8 * 8) if len(cur) >= 8 else len(cur)
            batches.append(cur[:keep])
            cur = cur[keep:]
            cur_max = max([max(src_len[j], tgt_len[j]) for j in cur], default=0)
            width = max(src_len[i], tgt_len[i], cur_max)
        cur.append(i)
        cur_max = width
    if cur:
        batches.append(cur)
    picks = rng.permutation(len(batches))[:n_batches]
    out = []
    for b in picks:
        pairs = [(_sentence(src_len[i], d, rng), _sentence(tgt_len[i], d, rng)) for i in batches[b]]
        out.append(_collate(pairs, d, device))
    return out


def make_gen_batches(d, n_sents, batch_size, max_len, seed, device):
    rng = np.random.default_rng(seed + 1)
    src_len, _ = wmt_lengths(n_sents, rng, max_len)
    src_len = np.sort(src_len)
    out = []
    for i in range(0, n_sents, batch_size):
        pairs = [(_sentence(n, d, rng), [d.eos()]) for n in src_len[i: i + batch_size]]
        b = _collate(pairs, d, device)
        b["net_input"].pop("prev_output_tokens")
        out.append(b)
    return out


