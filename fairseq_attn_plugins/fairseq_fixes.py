"""Fixes for fairseq bugs that would corrupt published numbers.

``batch_by_size`` drops the last batch when its size is not a multiple of
``--required-batch-size-multiple`` (default 8) in fairseq main / ve-fairseq
0.12.3 (facebookresearch/fairseq#5036): ``fairseq-generate`` then silently
skips up to 7 test sentences and BLEU is computed on an incomplete test set.
We keep that batch. Training batches are unaffected apart from keeping those
few sentences too.
"""

import numpy as np

_installed = False


def _keep_last_batch(original):
    def batch_by_size(indices, *args, **kwargs):
        batches = original(indices, *args, **kwargs)
        covered = sum(len(b) for b in batches)
        if covered < len(indices):
            used = set(int(i) for b in batches for i in b)
            rest = np.array([i for i in indices if int(i) not in used], dtype=np.int64)
            batches = list(batches) + [rest]
        return batches

    batch_by_size.__wrapped__ = original
    batch_by_size.__doc__ = original.__doc__
    return batch_by_size


def install() -> None:
    global _installed
    if _installed:
        return
    from fairseq.data import data_utils

    data_utils.batch_by_size = _keep_last_batch(data_utils.batch_by_size)
    _installed = True
