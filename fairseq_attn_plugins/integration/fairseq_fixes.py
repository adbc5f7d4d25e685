"""Fixes for fairseq bugs that would corrupt published numbers.

``batch_by_size`` drops the last batch when its size is not a multiple of
``--required-batch-size-multiple`` (default 8) in fairseq main / ve-fairseq
0.12.3 (facebookresearch/fairseq#5036): ``fairseq-generate`` then silently
skips up to 7 test sentences and BLEU is computed on an incomplete test set.
We keep that batch. Training batches are unaffected apart from keeping those
few sentences too.

``torchrun`` on CPU: fairseq's ``env://`` set-up (``_infer_torch_distributed_launch_init``)
sets ``device_id = rank % torch.cuda.device_count()``, a division by zero without GPUs,
so a multi-node CPU (gloo) launch through torchrun could not start. Without CUDA the
device id is 0 (CPU processes have no device to pick); with CUDA fairseq's code runs.

Installed by :mod:`.fixes`.
"""

import numpy as np


def keep_last_batch(original):
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


def cpu_safe_launch_init(original):
    def _infer_torch_distributed_launch_init(cfg):
        import os

        import torch

        if torch.cuda.device_count() > 0:
            return original(cfg)
        cfg.distributed_init_method = "env://"
        cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
        cfg.distributed_rank = int(os.environ["RANK"])
        cfg.device_id = 0
        cfg.distributed_no_spawn = True  # processes are created by torchrun

    _infer_torch_distributed_launch_init.__wrapped__ = original
    return _infer_torch_distributed_launch_init

