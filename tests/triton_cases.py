"""The cases of tests/test_triton_distance.py, run by the Triton kernels in a child process
with ``TRITON_INTERPRET=1`` (see triton_interpreter.py; not a test module). Usage:
``python tests/triton_cases.py KIND OUT.pt``: saves, per case, the inputs, the output and the
gradients of q, k, v and the table for one fixed output gradient.

Tiny shapes, tiles of 16 x 16 (T = 33 spans three tiles, the last one partial), float64
inputs (the kernels then accumulate in float64: the interpreter computes tl.dot in numpy).
"""

import sys

import torch

B, H, D, BUCKETS, MAX_DISTANCE = 2, 2, 8, 8, 6

#: kind -> (method, T, causal, padding): T = 1, 5, 33; distances beyond T5's max distance
#: (6) at T = 33; sentence 0 left-padded (under the causal mask its first queries see no
#: key), sentence 1 right-padded or (``empty``) every key padded
CASES = {
    "bias": [
        ("t5bias", 33, False, "empty"),
        ("t5bias", 33, True, "right"),
        ("alibi", 33, False, "right"),
        ("alibi", 5, True, "empty"),
        ("t5bias", 1, False, "right"),
    ],
}


def padding(T: int, pattern: str) -> torch.Tensor:
    """(B, T) True = pad: sentence 0 left-padded, 1 right-padded or (``empty``) every key
    padded."""
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[0, : T // 3] = True
    if pattern == "empty":
        kpm[1] = True
    else:
        kpm[1, T - T // 4:] = True
    return kpm


def inputs(case, seed: int):
    method, T, causal, pad = case
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    table = torch.randn(BUCKETS, H, generator=g, dtype=torch.float64) if method == "t5bias" else None
    dout = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    return dict(q=q, k=k, v=v, table=table, dout=dout, kpm=padding(T, pad), scale=D ** -0.5)


def terms_of(method: str, causal: bool, table):
    from fairseq_attn_core.backends.distance import DistanceTerms
    from fairseq_attn_core.pieces.alibi import alibi_slopes
    from fairseq_attn_core.pieces.t5bias import relative_position_bucket
    if method == "t5bias":
        return DistanceTerms(bias_table=table,
                             bucket=lambda rel: relative_position_bucket(rel, not causal, BUCKETS, MAX_DISTANCE))
    return DistanceTerms(slopes=tuple(alibi_slopes(H)))


def run_bias(case, seed):
    from fairseq_attn_core.backends.distance.triton_configs import SMALL
    from fairseq_attn_core.backends.distance.triton_launch import bias_attention
    method, T, causal, _ = case
    x = inputs(case, seed)
    leaves = [x[n].clone().requires_grad_(True) for n in ("q", "k", "v")]
    if x["table"] is not None:
        leaves.append(x["table"].clone().requires_grad_(True))
    out = bias_attention(terms_of(method, causal, leaves[3] if len(leaves) > 3 else None), *leaves[:3],
                         x["scale"], x["kpm"], causal, SMALL)
    grads = torch.autograd.grad(out, leaves, x["dout"])
    return dict(out=out.detach(), grads=[g.detach() for g in grads])


if __name__ == "__main__":
    kind, path = sys.argv[1], sys.argv[2]
    runner = {"bias": run_bias}[kind]
    torch.save({i: runner(case, seed=i) for i, case in enumerate(CASES[kind])}, path)
