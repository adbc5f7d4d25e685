"""The cases of tests/test_triton_distance.py, run by the Triton kernels in a child process
with ``TRITON_INTERPRET=1`` (see triton_interpreter.py; not a test module). Usage:
``python tests/triton_cases.py OUT.pt``: saves, per kind and case, the output and the
gradients of q, k, v and the table for one fixed output gradient (the inputs are drawn from
the case's seed: :func:`inputs` gives the tests the same ones).

Tiny shapes, tiles of 16 x 16 (backward_delta's of 32 rows, so its programs and d a_V's shares are not
backward_q's; T = 33 spans three tiles, the last one partial; at T = 33 and 47
the kernels with blocks of their own for partial tiles take other shapes, see :func:`run`), float64
inputs (the kernels then accumulate in float64: the interpreter computes tl.dot in numpy).
"""

import sys

import torch

B, D, BUCKETS, MAX_DISTANCE = 2, 8, 8, 6
#: Shaw's clip per length: below T at T = 33, above it at T = 5 (no distance reaches it)
CLIP = {33: 3, 32: 3, 47: 3, 48: 3, 5: 6, 1: 2, 128: 5, 113: 5}

#: kind -> (method, T, causal, padding, heads): T = 1, 5, 33, 40, 47, 32 and 48 (whole 16 x 16 tiles); distances
#: beyond T5's max distance (6) at T = 32, 33; lengths above and below Shaw's clip (:data:`CLIP`); sentence 0 left-padded
#: (under the causal mask its first queries see no key), sentence 1 right-padded or
#: (``empty``) every key padded. Two heads (each its own slopes, its own column of T5's table, its own
#: slice of q, k, v) in one case of each method and term; one head in the others (the interpreter runs
#: a program per sentence, head and tile: a second head doubles a case's time)
CASES = {
    "bias": [
        ("t5bias", 47, False, "empty", 1),  # the bias row narrower than the distances (WL + block_m + block_n < 46)
        ("t5bias", 33, True, "right", 1),
        ("alibi", 33, False, "right", 2),
        ("alibi", 5, True, "empty", 1),
        ("t5bias", 1, False, "right", 1),
        ("t5bias", 32, True, "right", 2),  # whole tiles: the kernels' unmasked loads
        ("t5bias", 48, False, "right", 1),  # whole tiles, far tiles both sides, no causal mask: Hopper's paths (run())
        ("t5bias", 40, False, "right", 1),  # Hopper's peeled last tile in every form (run()): backward_q's table sums
        ("alibi", 40, False, "empty", 1),  # the same: alibi's forward
    ],
    "keys": [  # the key term's code runs in every relpos kv case too
        ("relpos_k", 33, True, "right", 2),
        ("relpos_k", 48, False, "right", 1),  # whole tiles, far tiles both sides, no causal mask: Hopper's paths (run())
        ("relpos_k", 47, False, "empty", 1),  # the same with a partial tile: backward_kv's far tiles in one loop, masked
        ("relpos_k", 128, False, "right", 1),  # backward_q's wide far tiles (run()), the band moved left at the end
        ("relpos_k", 113, False, "empty", 1),  # the same with partial tiles (masked loads at both widths)
    ],
    "values": [
        ("relpos_kv", 33, False, "empty", 1),
        ("relpos_kv", 33, True, "right", 1),
        ("relpos_kv", 5, False, "right", 1),
        ("relpos_kv", 32, False, "empty", 2),  # whole tiles
        ("relpos_kv", 48, False, "right", 1),  # whole tiles, far tiles both sides, no causal mask (one loop in backward_kv)
        ("relpos_kv", 128, False, "empty", 1),  # backward_q's and the forward's wide far tiles (run())
        ("relpos_kv", 113, False, "right", 1),  # the same with partial tiles
    ],
    # the kernels with every term off (the static model's baseline, benchmarks/triton_static_cost.py: the alibi launch
    # with BIAS 0 and no split, :class:`TermsOff`), against attention without terms: one loop over the keys, at a
    # length no tile divides its last tile moved back and run after the loop
    "plain": [
        ("plain", 33, False, "right", 1),
        ("plain", 47, False, "empty", 1),
        ("plain", 32, False, "right", 1),
    ],
    # fp16 inputs and tables (the interpreter's fp16 dots are right; its bf16 ones are not): the kernels' half forms, PB
    # and dQA rounded to fp16 for their dots with the tables (triton_launch._half_bins), both forms of d w_K's share
    "half": [
        ("relpos_kv", 32, False, "right", 2),
        ("relpos_k", 113, False, "empty", 1),  # wide far tiles, the last tile moved back
        ("relpos_kv", 113, False, "right", 1),  # the same, with the Hopper form of d a_V's share (dO^T PB, run())
    ],
    # RoPE's fused rotation: (L, D, rotated dimensions, first position)
    "rope": [
        (7, 12, 8, 0),
        (5, 8, 8, 3),
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
    method, T, causal, pad, H = case
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    table = None
    if method == "t5bias":
        table = torch.randn(BUCKETS, H, generator=g, dtype=torch.float64)
    elif method.startswith("relpos"):
        table = torch.randn(2 * CLIP[T] + 1, D, generator=g, dtype=torch.float64)
    table_v = torch.randn(2 * CLIP[T] + 1, D, generator=g, dtype=torch.float64) if method == "relpos_kv" else None
    dout = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    return dict(q=q, k=k, v=v, table=table, table_v=table_v, dout=dout, kpm=padding(T, pad), scale=D ** -0.5)


class TermsOff:
    """The kernels' module with every term off, as the static model launches its baseline: each launch of the alibi
    form with BIAS 0, no split (non-causal) and the forward's moved-back tile after its loop (as the launcher's rule
    has it without alibi: triton_configs.peel_last_tile)."""

    def __init__(self, module):
        self.module = module

    def __getattr__(self, name):
        kernel = getattr(self.module, name)
        if name not in ("forward", "backward_delta", "backward_q", "backward_kv"):
            return kernel
        return _Grid(kernel)


class _Grid:
    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            if "BIAS" in kwargs:
                kwargs = dict(kwargs, BIAS=0, SPLIT=kwargs["CAUSAL"])
            if "PEEL" in kwargs:
                kwargs = dict(kwargs, PEEL=kwargs["SHIFT"])
            return self.kernel[grid](*args, **kwargs)
        return launch


def terms_of(method: str, causal: bool, T: int, H: int, table=None, table_v=None):
    from fairseq_attn_core.backends.distance import DistanceTerms
    from fairseq_attn_core.pieces.alibi import alibi_slopes
    from fairseq_attn_core.pieces.t5bias import relative_position_bucket
    if method == "t5bias":
        return DistanceTerms(bias_table=table,
                             bucket=lambda rel: relative_position_bucket(rel, not causal, BUCKETS, MAX_DISTANCE))
    if method.startswith("relpos"):
        return DistanceTerms(key_table=table, value_table=table_v, clip=CLIP[T])
    return DistanceTerms(slopes=tuple(alibi_slopes(H)))  # alibi, and "plain" (launched with its terms off)


def half(x: dict) -> dict:
    """The inputs rounded to fp16 (float64 tensors: the reference's), the rest as they are."""
    return {n: t.half().double() if torch.is_tensor(t) and t.is_floating_point() else t for n, t in x.items()}


def run(case, seed, dtype=torch.float64):
    import dataclasses

    from fairseq_attn_core.backends.distance.triton_configs import SMALL, BlockConfig
    from fairseq_attn_core.backends.distance.triton_launch import triton_attention
    method, T, causal, _, H = case
    x = inputs(case, seed)
    leaves = [x[n].to(dtype).requires_grad_(True) for n in ("q", "k", "v", "table", "table_v") if x[n] is not None]
    # the key-only cases and relpos kv's at T = 128 and 113 run the Hopper forms of Shaw's table shares (backward_q's
    # q^T dQA, backward_delta's dO^T PB), the others dQA^T q and PB^T dO;
    # t5bias at T = 47, 48 and 32 its Hopper form of the far cells' sums (one reduction; whole tiles only: T = 48 and
    # 32), the others the other form
    configs = dataclasses.replace(SMALL, warpgroup_mma=method == "relpos_k" or (method == "relpos_kv" and T in (128, 113))
                                  or (method == "t5bias" and T in (47, 48, 32)))
    if T == 48:  # backward_kv's blocks of its own (t5bias or Shaw's key term alone without the causal mask, whole
        # tiles, as on Hopper): its far tiles in one loop, dP first, the padding read before the loops
        configs = dataclasses.replace(configs, backward_kv_bias=configs.backward_kv,
                                      backward_kv_keys_merged=configs.backward_kv)
    if T in (128, 113):  # backward_q's far tiles wider than its band tiles, and the forward's with Shaw's value term (as on
        # Hopper: 64 and 32 there), the band from a multiple of 16
        configs = dataclasses.replace(configs, backward_q_terms=BlockConfig(16, 32, 1, 1), backward_q_keys_far=64,
                                      forward_values=BlockConfig(16, 32, 1, 1), forward_keys_far=64)
    if T == 40:  # the moved-back last tile after the far loop in every form, as on Hopper (sm_80's rule elsewhere)
        configs = dataclasses.replace(configs, peel_every_form=True)
    if T in (33, 47):  # partial tiles: the launcher's own forward blocks for them (triton_configs' forward_partial:
        # alibi's and relpos k's forward), and tiles longer than wide or wider than long where Hopper and Ampere run
        # them (a table's gradient in backward_q, Shaw's value term in backward_kv): other shapes than the rest's
        configs = dataclasses.replace(configs, forward_partial=BlockConfig(32, 16, 1, 1),
                                      backward_q_table=BlockConfig(16, 32, 1, 1),
                                      backward_kv_values=BlockConfig(32, 16, 1, 1))
    module = None
    if method == "plain":
        from fairseq_attn_core.backends.distance.triton_launch import kernels
        module = TermsOff(kernels())
    out = triton_attention(terms_of(method, causal, T, H, *leaves[3:]), *leaves[:3],
                           x["scale"], x["kpm"], causal, configs, module)
    grads = torch.autograd.grad(out, leaves, x["dout"].to(dtype))
    return dict(out=out.detach(), grads=[g.detach() for g in grads])


def rope_inputs(case, seed: int):
    L, D, rot, first = case
    g = torch.Generator().manual_seed(seed)
    x, dy = (torch.randn(B, 2, L, D, generator=g, dtype=torch.float64) for _ in range(2))
    return dict(x=x, dy=dy, pos=torch.arange(first, first + L), rot=rot)


def run_rope(case, seed):
    from fairseq_attn_core.rope_fused import fused_rotate
    x = rope_inputs(case, seed)
    leaf = x["x"].clone().requires_grad_(True)
    out = fused_rotate(leaf, x["pos"], x["rot"], 10000.0)
    return dict(out=out.detach(), grads=list(torch.autograd.grad(out, [leaf], x["dy"])))


if __name__ == "__main__":
    from triton_interpreter import skip_overflow_checks
    skip_overflow_checks()
    torch.save({kind: {i: run_rope(case, seed=i) if kind == "rope" else
                       run(case, seed=i, dtype=torch.float16 if kind == "half" else torch.float64)
                       for i, case in enumerate(cases)}
                for kind, cases in CASES.items()}, sys.argv[1])
