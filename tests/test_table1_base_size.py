"""Table 1's parameters at base size: counted once per process, each the count of the model built,
and kept per code: a later process reads it where torch cannot be imported."""

import subprocess
import sys

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


def test_a_base_size_count_is_kept_for_later_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # a cache of its own: counted by building the model
    arch = table1.ROW_BY_KEY["rel_pos"].arch
    count = table1.base_size_params.__wrapped__(arch)  # past this process's own memo
    script = ("import sys\nsys.modules['torch'] = None\nfrom fairseq_attn_reports import table1\n"
              f"print(table1.base_size_params({arch!r}))\n")
    again = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert int(again.stdout) == count
