"""How often the flex paths compile: dynamo's capture and guards, checked on CPU.

On CUDA ``--attn-backend auto`` runs relpos kv/tied, alibi and the CSAN bands through
``torch.compile(flex_attention)``. What decides how many graphs CUDA compiles (dynamo's
capture, its guards, the recompile limit) is device-independent, so these tests run it on
CPU with ``--attn-flex-compile aot_eager``: whole models forward (encoder and teacher-forced
decoder) and beam search (incremental decoding) over many batch shapes, with and without
padding, a batch of one sentence among them. They assert the number of graphs dynamo
installs (a bound per architecture, stated in docs/explanation/architecture.md), no graph break, no
recompile-limit hit (``fail_on_recompile_limit_hit``: reaching it raises), and outputs
equal to the explicit path; every compiled call also refuses a score_mod / mask_mod that
captures a Python number (what inductor failed to lower for relpos on an H200). Not covered
here: inductor's CUDA kernels and the backward (benchmarks/gpu_checks.sh runs them on a GPU).
"""

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from torch.testing import assert_close

from attn_helpers import build_model, toy_dictionary, token_batch
from fairseq_attn_core import PieceConfigError
from fairseq_attn_core.backends import flex

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# architecture, its flags, the bound on installed graphs (one form per layer kind: encoder
# self-attention, and the decoder's with fairseq's future mask; the CSAN bands are encoder-only)
FLEX_ARCHS = [
    ("transformer_relpos_wmt_en_de", [], 2),
    ("transformer_relpos_wmt_en_de", ["--relpos-mode", "tied"], 2),
    ("transformer_alibi_wmt_en_de", [], 2),
    ("transformer_csan1d_wmt_en_de", ["--csan-layers", "0-1"], 1),
    ("transformer_csan2d_wmt_en_de", ["--csan-layers", "0-1"], 1),
]
# source lengths per batch: padded and unpadded, one sentence, 1 to 15 tokens
SHAPES = [[5, 3], [7, 7, 2], [9], [4, 4, 4, 4], [12, 3, 8], [6, 2], [15, 11], [3], [10, 10],
          [8, 1, 5, 7], [13, 2, 2]]


@pytest.fixture
def graph_count(monkeypatch):
    """aot_eager through a backend that counts its calls; dynamo reset; the recompile
    limit made an error. torch._dynamo is imported here, not at collection (~1.4 s of CPU in
    every pytest-xdist worker, though one runs these tests)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    calls = []
    aot_eager = torch._dynamo.lookup_backend("aot_eager")

    def counting(gm, example_inputs):
        calls.append(len(gm.graph.nodes))
        return aot_eager(gm, example_inputs)

    monkeypatch.setitem(flex.COMPILE_BACKENDS, "aot_eager", counting)
    monkeypatch.setattr(flex, "_compiled", {})
    monkeypatch.setattr(torch._dynamo.config, "fail_on_recompile_limit_hit", True)
    torch._dynamo.reset()
    counters.clear()
    yield calls
    torch._dynamo.reset()


def _model(arch, flags, backend, compile_mode="none"):
    d = toy_dictionary()
    model, task, _ = build_model(arch, ["--attn-backend", backend, "--attention-dropout", "0",
                                        "--attn-flex-compile", compile_mode, *flags],
                                 dictionary=d)
    return model.eval(), task


@pytest.mark.parametrize("arch,flags,bound", FLEX_ARCHS,
                         ids=["relpos_kv", "relpos_tied", "alibi", "csan1d", "csan2d"])
def test_flex_paths_compile_a_bounded_number_of_graphs(graph_count, arch, flags, bound):
    flexed, task = _model(arch, flags, "flex", "aot_eager")
    explicit, _ = _model(arch, flags, "explicit")
    d = task.source_dictionary
    with torch.no_grad():
        for n, lens in enumerate(SHAPES):
            src, src_len = token_batch(lens, d, seed=n)
            prev, _ = token_batch([max(2, x - 1) for x in lens], d, left_pad=False, seed=50 + n)
            assert_close(flexed(src, src_len, prev)[0], explicit(src, src_len, prev)[0],
                         rtol=1e-4, atol=1e-4)
        if "csan" not in arch:  # incremental decoding: one-token steps, growing keys
            for n, lens in enumerate(SHAPES[:4]):
                src, src_len = token_batch(lens, d, seed=n)
                sample = {"net_input": {"src_tokens": src, "src_lengths": src_len}}
                hyps = [SequenceGenerator([m], task.target_dictionary, beam_size=2, max_len_b=6)
                        .generate([m], sample) for m in (flexed, explicit)]
                for a, b in zip(*hyps):
                    assert torch.equal(a[0]["tokens"], b[0]["tokens"])
                    assert_close(a[0]["score"], b[0]["score"], rtol=1e-4, atol=1e-4)
    from torch._dynamo.utils import counters

    installed = counters["stats"]["unique_graphs"]
    assert 1 <= installed <= bound, (installed, graph_count)
    assert not counters["graph_break"], dict(counters["graph_break"])


def test_flex_compile_flag_is_checked():
    with pytest.raises(PieceConfigError, match="--attn-flex-compile must be one of"):
        _model("transformer_alibi_wmt_en_de", [], "flex", "eager")


def test_compile_backend_per_mode():
    assert flex.compile_backend("auto", on_cuda=True) == "inductor"
    assert flex.compile_backend("auto", on_cuda=False) is None
    assert flex.compile_backend("none", on_cuda=True) is None
    assert flex.compile_backend("aot_eager", on_cuda=False) == "aot_eager"


def test_cpu_training_on_flex_is_refused_in_one_line():
    """torch refuses flex_attention's backward on CPU: the first training forward says so
    in one line instead of a NotImplementedError traceback at backward."""
    if flex.cpu_backward_ok():
        pytest.skip("this torch runs flex_attention's backward on CPU")
    model, task = _model("transformer_relpos_wmt_en_de", [], "flex")
    d = task.source_dictionary
    src, src_len = token_batch([5, 3], d)
    prev, _ = token_batch([4, 2], d, left_pad=False)
    with pytest.raises(PieceConfigError) as e:
        model.train()(src, src_len, prev)
    assert "FlexAttention has no backward on CPU" in str(e.value) and "\n" not in str(e.value)
    with torch.no_grad():  # inference on CPU still runs the flex path
        model.eval()(src, src_len, prev)


def test_compiled_call_refuses_captured_python_numbers(graph_count):
    """inductor lowers a Python number a score_mod captures as a symbol without a dtype
    (an error at compile time on CUDA): the compiled call refuses it in one line, and
    takes the same value as a 0-dim tensor (booleans are constants, allowed)."""
    q = torch.randn(1, 2, 8, 16)
    clip = 2

    def numbers(score, b, h, i, j):
        return score + torch.clamp(j - i, -clip, clip)

    with pytest.raises(TypeError, match=r"captures the Python number\(s\) \[2\]"):
        flex.call(q, q, q, numbers, None, 0.25, compile="aot_eager")
    clip_t, flag = torch.tensor(clip), True

    def tensors(score, b, h, i, j):
        return score + torch.clamp(j - i, -clip_t, clip_t) * flag

    out = flex.call(q, q, q, tensors, None, 0.25, compile="aot_eager")
    scores = (q @ q.transpose(-1, -2)).double() * 0.25
    for i in range(8):
        for j in range(8):
            scores[..., i, j] += max(-clip, min(clip, j - i))
    assert_close(out.double(), scores.softmax(-1) @ q.double(), rtol=1e-5, atol=1e-5)


def test_cpu_training_on_flex_is_refused_before_anything_is_written(tmp_path, capsys):
    """fairseq-train on CPU with --attn-backend flex: refused when its trainer is made (after the
    model build, before any step: no crash.pt, no checkpoint); the recipes' training step refuses
    it before its run record."""
    if flex.cpu_backward_ok():
        pytest.skip("this torch runs flex_attention's backward on CPU")
    import os
    import re

    import trained_models
    from cli_helpers import PLUGIN_DIR, TINY, TRAIN, train_in_process
    from fairseq_attn_recipes import train as recipes_train

    argv = [trained_models.data_dir(), "--user-dir", PLUGIN_DIR, "--task", "translation",
            "--arch", "transformer_relpos_wmt_en_de", "--attn-backend", "flex", *TINY, *TRAIN,
            "--max-update", "2", "--share-all-embeddings"]
    save = tmp_path / "fairseq-train"
    with pytest.raises(PieceConfigError, match=re.escape(flex.CPU_TRAINING)):
        train_in_process([*argv, "--save-dir", str(save)])
    assert not save.exists() or os.listdir(save) == []
    save = tmp_path / "recipe"
    assert recipes_train.main([*argv, "--save-dir", str(save)]) == 1
    assert f"error: {flex.CPU_TRAINING}" in capsys.readouterr().err
    assert not save.exists()
