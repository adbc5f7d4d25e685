"""How much training a run has seen: updates, epochs, pairs, original pairs and tokens (torch-free).

fairseq's batches are made once and every epoch goes through the whole training set once (the
batches shuffled), so an epoch always takes the same number of updates and holds the same pairs and
tokens. A run's record keeps that epoch (``"epoch"``: updates, pairs, original pairs, source and
target tokens with their EOS, as fairseq counts them) and what it has seen at its last update
(``"seen"``). At ``U`` updates a run has seen ``U / updates_per_epoch`` epochs: exact at an epoch's
end; within an epoch, the pairs and tokens of its share of the updates (the batches of the epoch
hold different pairs, so that part is a proportion, not a count).

*Original pairs* are the training pairs the data was made of, before TRAIN_CONCAT's joins (in the
pairs-alone condition every pair): with the joins an epoch holds more pairs and tokens, and takes more
updates, so at the same update each original pair has been seen on its own fewer times.
"""

import struct
import sys
from array import array
from typing import Dict, Iterable, Optional, Tuple

_MAGIC = b"MMIDIDX\x00\x00"


def idx_sizes(path: str) -> array:
    """The length of every item (tokens, EOS included) of a fairseq mmap dataset's ``.idx`` file."""
    with open(path, "rb") as f:
        head = f.read(26)
        if len(head) < 26 or head[:9] != _MAGIC or struct.unpack("<Q", head[9:17]) != (1,):
            raise ValueError(f"{path}: not a fairseq mmap index (fairseq-preprocess --dataset-impl mmap)")
        n = struct.unpack("<Q", head[18:26])[0]
        sizes = array("i")
        sizes.frombytes(f.read(4 * n))
    if len(sizes) != n:
        raise ValueError(f"{path}: truncated ({len(sizes)} of {n} sizes)")
    if sys.byteorder != "little":
        sizes.byteswap()
    return sizes


def epoch_content(data_dir: str, src: str, tgt: str, original_pairs: int) -> Dict:
    """Pairs, original pairs and tokens of one epoch of ``data_dir``'s training set."""
    import os

    prefix = os.path.join(data_dir, f"train.{src}-{tgt}.")
    s, t = idx_sizes(prefix + f"{src}.idx"), idx_sizes(prefix + f"{tgt}.idx")
    if len(s) != len(t):
        raise ValueError(f"{prefix}*.idx: {len(s)} source but {len(t)} target items")
    return {"pairs": len(s), "original_pairs": original_pairs, "src_tokens": sum(s), "tgt_tokens": sum(t)}


def updates_per_epoch(epoch_ends: Iterable[Tuple[int, int]]) -> Optional[int]:
    """The updates of one epoch from ``(epoch, num_updates at its end)`` (fairseq's per-epoch ``train``
    records); None when no epoch ended. The last epoch may end early (a training stopped inside it,
    by --patience or --max-update, logs it at its stop); every other epoch must take the same
    updates, and the last at most as many: else an error (the counts below would be wrong). With one
    epoch logged, its updates are taken as an epoch's. Not told apart: a last epoch shortened by a
    resume with other batching (workers, MAX_TOKENS) from one the stop cut short; the run record says
    each start's settings."""
    ends = dict(epoch_ends)  # a resumed run logs an epoch again: the later record wins
    if not ends:
        return None
    last = max(ends)
    whole = {e: u for e, u in ends.items() if e != last} or ends
    per = {u / e for e, u in whole.items()}
    each = next(iter(per))
    if len(per) != 1 or not float(each).is_integer() or not (last - 1) * each < ends[last] <= last * each:
        raise ValueError(f"epochs of different lengths: {sorted(ends.items())} (epoch, updates at its end)")
    return int(each)


def seen_at(epoch: Dict, updates: int) -> Dict:
    """What a run with epochs ``epoch`` (its record's ``"epoch"``) has seen after ``updates``."""
    out = {"updates": updates, "epochs": None, "pairs": None, "original_pairs": None,
           "src_tokens": None, "tgt_tokens": None}
    per = (epoch or {}).get("updates")
    if not per:
        return out
    epochs = updates / per
    out["epochs"] = epochs
    for key in ("pairs", "original_pairs", "src_tokens", "tgt_tokens"):
        if epoch.get(key) is not None:
            out[key] = epochs * epoch[key]
    return out
