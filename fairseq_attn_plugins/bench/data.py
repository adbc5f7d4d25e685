"""Identical batches for every system: WMT14-like lengths (or a data-bin's), fairseq-style batching."""

import os
import re
from typing import Optional, Tuple

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


def make_train_batches(d, max_tokens, n_batches, max_len, seed, device, tgt_d=None,
                       lengths: Optional[Tuple[np.ndarray, np.ndarray]] = None):
    """Identical batches for every system: like fairseq's batch_by_size on sorted lengths.
    ``tgt_d``: the target's own dictionary (else ``d``); ``lengths``: (source, target) lengths of
    real pairs, EOS included, to draw the sentences from (else WMT-like lengths below ``max_len``)."""
    tgt_d = d if tgt_d is None else tgt_d
    rng = np.random.default_rng(seed)
    n = max(64, n_batches * max_tokens // 20)
    if lengths is None:
        src_len, tgt_len = wmt_lengths(n, rng, max_len)
    else:
        pick = rng.choice(len(lengths[0]), size=n, replace=n > len(lengths[0]))
        src_len, tgt_len = np.asarray(lengths[0])[pick], np.asarray(lengths[1])[pick]
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
        pairs = [(_sentence(src_len[i], d, rng), _sentence(tgt_len[i], tgt_d, rng)) for i in batches[b]]
        out.append(_collate(pairs, d, device))
    return out


def load_data_bin(path: str, split: str = "train"):
    """(source dictionary, target dictionary, (source lengths, target lengths), "SRC-TGT") of a
    fairseq-preprocess data-bin: its one language pair, as fairseq's translation task finds it
    (``{split}.SRC-TGT.SRC.idx``); the lengths of every pair of ``split``, EOS included."""
    from fairseq.data import Dictionary, data_utils

    if not os.path.isdir(path):
        raise ValueError(f"--data-bin {path}: no such folder")
    found = sorted({m.groups() for m in (re.fullmatch(rf"{re.escape(split)}\.([^.-]+)-([^.-]+)\.\1\.idx", f)
                                         for f in os.listdir(path)) if m})
    if len(found) != 1:
        raise ValueError(f"--data-bin {path}: expected the files of one language pair "
                         f"({split}.SRC-TGT.SRC.idx), found {len(found)}")
    src, tgt = found[0]
    dicts, sizes = [], []
    for lang in (src, tgt):
        dict_path = os.path.join(path, f"dict.{lang}.txt")
        if not os.path.isfile(dict_path):
            raise ValueError(f"--data-bin {path}: {dict_path} is missing")
        dicts.append(Dictionary.load(dict_path))
        data = data_utils.load_indexed_dataset(os.path.join(path, f"{split}.{src}-{tgt}.{lang}"), dicts[-1])
        if data is None or len(data) == 0:
            raise ValueError(f"--data-bin {path}: cannot read the {split} split of {lang}")
        sizes.append(np.array(data.sizes, dtype=np.int64))  # a copy: the dataset unmaps its file when freed
    return dicts[0], dicts[1], (sizes[0], sizes[1]), f"{src}-{tgt}"


def make_gen_batches(d, n_sents, batch_size, max_len, seed, device, lengths=None):
    rng = np.random.default_rng(seed + 1)
    if lengths is None:
        src_len, _ = wmt_lengths(n_sents, rng, max_len)
    else:
        src_len = np.asarray(lengths[0])[rng.choice(len(lengths[0]), size=n_sents, replace=n_sents > len(lengths[0]))]
    src_len = np.sort(src_len)
    out = []
    for i in range(0, n_sents, batch_size):
        pairs = [(_sentence(n, d, rng), [d.eos()]) for n in src_len[i: i + batch_size]]
        b = _collate(pairs, d, device)
        b["net_input"].pop("prev_output_tokens")
        out.append(b)
    return out


