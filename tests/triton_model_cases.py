"""The layer cases of tests/test_triton_backend.py, run in a child process with
``TRITON_INTERPRET=1`` (see triton_interpreter.py; not a test module; the core alone, no
fairseq import). Usage: ``python tests/triton_model_cases.py OUT.pt``: per piece and side, a
self-attention layer built with ``--attn-backend triton`` and the same layer on the reference
backend, in float64, one padded batch (the decoder's with fairseq's future mask) forward and
backward; saves the outputs, the input's and every parameter's gradient, the path each ran,
the refusals the interpreter leaves to the build (pieces the kernels do not run, a head size
above their largest config), and the Triton bench's count of kernel specializations.
"""

import argparse
import sys

import torch

#: piece, its flags, the reference backend (fused where it runs the piece)
CASES = {
    "t5bias": (dict(t5_buckets=8, t5_max_distance=6), "fused"),
    "relpos_kv": (dict(relpos_k=3), "explicit"),
}
PIECE = {"t5bias": "t5bias", "relpos_kv": "relpos"}
LENGTHS = (9, 5)  # B x H = 4 programs per kernel: the interpreter runs each in Python
EMBED, HEADS = 16, 2


def args_for(pieces, **flags):
    from fairseq_attn_core import attention_defaults, validate_attention_args
    args = argparse.Namespace(encoder_layers=1, decoder_layers=1, encoder_attention_heads=HEADS,
                              decoder_attention_heads=HEADS, attn_pieces=pieces, **flags)
    attention_defaults(args)
    validate_attention_args(args)
    return args


def layer(args, side, backend, embed=EMBED, heads=HEADS):
    from fairseq_attn_core import AttentionSite, SelfAttention, build_pieces
    torch.manual_seed(0)
    site = AttentionSite(side=side, layer_idx=0, num_layers=1, num_heads=heads, head_dim=embed // heads)
    attn = SelfAttention(embed, heads, site, pieces=build_pieces(args, site), backend=backend).double()
    with torch.no_grad():  # every parameter non-zero, so that each matters
        for p in attn.parameters():
            p.normal_(0, 0.3)
    return attn


def run_layer(args, side, backend):
    attn = layer(args, side, backend)
    g = torch.Generator().manual_seed(1)
    T, B = max(LENGTHS), len(LENGTHS)
    x = torch.randn(T, B, EMBED, generator=g, dtype=torch.float64, requires_grad=True)
    kpm = torch.arange(T)[None, :] >= torch.tensor(LENGTHS)[:, None]  # right-padded, as a decoder's
    if side == "encoder":
        kpm = kpm.flip(1)  # left-padded, as fairseq's source
    future = torch.zeros(T, T, dtype=torch.float64).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1),
                                                                float("-inf"))
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False,
                attn_mask=future if side == "decoder" else None)
    y.backward(torch.randn(y.shape, generator=g, dtype=y.dtype))
    return dict(out=y.detach(), dx=x.grad, grads={n: p.grad for n, p in attn.named_parameters()},
                path=attn.last_run[0])


def refusals():
    from fairseq_attn_core import PieceConfigError
    out = {}
    for name, build in (("rope", lambda: args_for("rope", attn_backend="triton")),
                        ("two_pieces", lambda: layer(args_for("t5bias,csan1d", csan_layers="0", csan_window=3),
                                                     "encoder", "triton")),
                        ("head_dim", lambda: layer(args_for("t5bias"), "encoder", "triton", embed=512, heads=2))):
        try:
            build()
            out[name] = None
        except PieceConfigError as e:
            out[name] = str(e)
    return out


def bench_compiles():
    """benchmarks/triton_distance_bench.py's timing of alibi and t5bias (its learned table: backward_q's per-distance
    sums) at lengths 16, 32, 12 (what gpu_checks.sh rehearses), in this process: its output and exit status."""
    import contextlib
    import io
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import triton_distance_bench

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = triton_distance_bench.main(
            ["--device", "cpu", "--time", "--dtypes", "fp32", "--methods", "alibi,t5bias", "--lengths", "16,32,12",
             "--tokens", "16", "--batches", "1", "--rounds", "1", "--profile-passes", "0", "--max-compiles", "5"])
    return dict(status=status, out=out.getvalue(), err=err.getvalue())


if __name__ == "__main__":
    from triton_interpreter import skip_overflow_checks
    skip_overflow_checks()
    results = {"bench": bench_compiles()}
    for name, (flags, ref) in CASES.items():
        args = args_for(PIECE[name], **flags)
        for side in ("encoder", "decoder"):
            results[f"{name} {side}"] = {b: run_layer(args, side, b) for b in ("triton", ref)}
    results["refusals"] = refusals()
    torch.save(results, sys.argv[1])
