"""The attention core in a process where fairseq cannot be imported (``sys.modules["fairseq"] =
None``, in a subprocess so that other tests keep fairseq): a relpos + csan2d layer runs forward
and backward, and gives the numbers of the fairseq plugin's layer built from the same seed."""

import os
import subprocess
import sys

import torch
from torch.testing import assert_close

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FLAGS = dict(relpos_layers="0", csan_layers="0", csan_window=3)

BUILD_AND_RUN = """
import argparse
import torch
from fairseq_attn_core import AttentionSite, attention_defaults, build_pieces, validate_attention_args


def run(layer_class, out_path, **extra):
    args = argparse.Namespace(encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                              decoder_attention_heads=4, attn_pieces="relpos,csan2d", **FLAGS)
    attention_defaults(args)
    validate_attention_args(args)
    site = AttentionSite(side="encoder", layer_idx=0, num_layers=1, num_heads=4, head_dim=4)
    torch.manual_seed(0)
    attn = layer_class(16, 4, site, pieces=build_pieces(args, site), **extra).train()
    x = torch.randn(7, 2, 16, generator=torch.Generator().manual_seed(1), requires_grad=True)
    kpm = torch.zeros(2, 7, dtype=torch.bool)
    kpm[1, :2] = True  # the second sentence is left-padded by two
    out, weights = attn(x, x, x, key_padding_mask=kpm, need_weights=True)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    grads = {name: p.grad for name, p in attn.named_parameters()}
    torch.save({"names": [p.name for p in attn.pieces], "out": out.detach(), "weights": weights.detach(),
                "x_grad": x.grad, "grads": grads}, out_path)
"""


def test_a_relpos_and_csan2d_layer_runs_forward_and_backward_without_fairseq(tmp_path):
    out_path = tmp_path / "core.pt"
    script = ("import sys\nsys.modules['fairseq'] = None\n" + f"FLAGS = {FLAGS!r}\n" + BUILD_AND_RUN +
              "from fairseq_attn_core import SelfAttention\n"
              f"run(SelfAttention, {str(out_path)!r})\n"
              "loaded = sorted(m for m in sys.modules if m == 'fairseq' or m.startswith('fairseq.'))\n"
              "assert loaded == ['fairseq'] and sys.modules['fairseq'] is None, loaded\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    core = torch.load(out_path)
    assert core["names"] == ["relpos", "csan2d"]
    assert core["out"].shape == (7, 2, 16) and core["weights"].shape == (2, 7, 7)
    for name in ("pieces.0.rel_keys", "pieces.0.rel_values", "q_proj.weight", "out_proj.bias"):
        assert core["grads"][name] is not None and core["grads"][name].abs().sum() > 0, name
    assert torch.isfinite(core["x_grad"]).all() and core["x_grad"].abs().sum() > 0

    # the fairseq plugin's layer from the same seed: the same parameters, outputs and gradients
    from fairseq_attn_plugins.models.self_attention import PluginSelfAttention

    namespace = {"FLAGS": FLAGS}
    exec(BUILD_AND_RUN, namespace)
    plugin_path = tmp_path / "plugin.pt"
    namespace["run"](PluginSelfAttention, str(plugin_path))
    plugin = torch.load(plugin_path)
    for key in ("out", "weights", "x_grad"):
        assert_close(core[key], plugin[key], rtol=0, atol=0)
    assert core["grads"].keys() == plugin["grads"].keys()
    for name, grad in core["grads"].items():
        assert_close(grad, plugin["grads"][name], rtol=0, atol=0)

