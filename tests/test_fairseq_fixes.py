"""fairseq's batch_by_size must not drop sentences (fairseq#5036)."""

import numpy as np
import pytest
from fairseq.data import data_utils

import fairseq_attn_plugins  # noqa: F401  (installs the fix)


@pytest.mark.parametrize("n, mult", [(20, 8), (7, 8), (16, 8), (21, 4), (5, 1)])
@pytest.mark.parametrize("vec", [True, False])
def test_every_index_is_batched_exactly_once(n, mult, vec):
    indices = np.arange(n, dtype=np.int64)[::-1].copy()
    sizes = np.full(n, 6, dtype=np.int64)
    batches = data_utils.batch_by_size(
        indices, num_tokens_fn=lambda i: 6, num_tokens_vec=sizes if vec else None,
        max_tokens=60, required_batch_size_multiple=mult,
    )
    flat = [int(i) for b in batches for i in b]
    assert sorted(flat) == list(range(n))
    assert all(len(b) * 6 <= 60 for b in batches)
    # every batch but the last keeps fairseq's multiple
    assert all(len(b) % mult == 0 for b in batches[:-1])


def test_unpatched_fairseq_drops_sentences():
    """Documents the upstream bug the fix exists for (fails once fairseq fixes it)."""
    original = data_utils.batch_by_size.__wrapped__
    indices = np.arange(20, dtype=np.int64)
    batches = original(indices, num_tokens_fn=lambda i: 6, num_tokens_vec=np.full(20, 6),
                       max_tokens=12000, required_batch_size_multiple=8)
    assert sum(len(b) for b in batches) == 16
