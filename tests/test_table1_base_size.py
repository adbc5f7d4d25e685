"""Table 1's parameters at base size: counted once per process, each the count of the model built."""

import torch

from fairseq_attn_reports import table1


def test_base_size_count_is_the_built_models_and_made_once():
    from fairseq_attn_plugins.bench.systems import build_model, make_dictionary

    arch = table1.ROW_BY_KEY["rel_pos"].arch
    torch.manual_seed(123)
    state = torch.get_rng_state()
    before = table1.base_size_params.cache_info()
    count = table1.base_size_params(arch)
    assert torch.equal(torch.get_rng_state(), state)  # the global random state left as it was
    model = build_model(arch, make_dictionary(1000), None, seed=0)
    plain = 0
    for p in model.parameters():
        plain += p.numel()
    assert count == plain and count > 44_000_000
    assert table1.base_size_params(arch) == count
    after = table1.base_size_params.cache_info()
    assert after.hits == before.hits + 1 and after.misses <= before.misses + 1
