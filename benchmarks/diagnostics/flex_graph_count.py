"""How many graphs torch.compile(flex_attention) installs over many batch shapes.

A 2+2-layer model of each flex-path architecture runs its whole forward (encoder and
teacher-forced decoder, as ``fairseq-generate --score-reference``) over 11 batch shapes
with ``--attn-backend flex`` and ``--attn-flex-compile aot_eager`` (default): dynamo's capture and
guards, which decide how often CUDA compiles, without inductor. Prints the graphs dynamo
installed (``unique_graphs``), the backend calls (restarts included), graph breaks and
whether the recompile limit was hit.

On a GPU, ``--device cuda --compile inductor`` compiles the real kernels, and ``--train``
runs forward + backward in training mode (fp16 on CUDA) with the first batch's output and
gradients compared with the explicit path's.

    python benchmarks/diagnostics/flex_graph_count.py            # this tree
    python benchmarks/diagnostics/flex_graph_count.py --patch    # a tree without the flag
                                                                 # (wraps flex.kernel itself)
    python benchmarks/diagnostics/flex_graph_count.py --device cuda --compile inductor --train
"""

import argparse
import copy
import logging
import os
import sys
import time
import warnings

import torch
import torch._dynamo
import torch.nn.attention.flex_attention as torch_flex
from torch._dynamo.utils import counters

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
from attn_helpers import build_model, token_batch, toy_dictionary  # noqa: E402

from fairseq_attn_core.backends import flex  # noqa: E402
from fairseq_attn_core.core import SelfAttention  # noqa: E402

ARCHS = {"relpos_kv": ("transformer_relpos_wmt_en_de", []),
         "relpos_tied": ("transformer_relpos_wmt_en_de", ["--relpos-mode", "tied"]),
         "alibi": ("transformer_alibi_wmt_en_de", []),
         "csan1d": ("transformer_csan1d_wmt_en_de", ["--csan-layers", "0-1"]),
         "csan2d": ("transformer_csan2d_wmt_en_de", ["--csan-layers", "0-1"])}
SHAPES = [[5, 3], [7, 7, 2], [9], [4, 4, 4, 4], [12, 3, 8], [6, 2], [15, 11], [3], [10, 10],
          [8, 1, 5, 7], [13, 2, 2]]


def main():
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patch", action="store_true", help="a tree without --attn-flex-compile")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--compile", choices=("aot_eager", "inductor"), default="aot_eager")
    ap.add_argument("--train", action="store_true",
                    help="forward + backward in training mode (no attention dropout)")
    ap.add_argument("--archs", default=",".join(ARCHS), help="comma list of " + ",".join(ARCHS))
    opts = ap.parse_args()
    unknown = set(opts.archs.split(",")) - set(ARCHS)
    if unknown:
        ap.error(f"--archs: unknown {sorted(unknown)}; allowed: {','.join(ARCHS)}")
    device = torch.device(opts.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    patch = opts.patch
    calls = [0]
    real_backend = torch._dynamo.lookup_backend(opts.compile)

    def counting(gm, example_inputs):
        calls[0] += 1
        return real_backend(gm, example_inputs)

    hit = []

    class LimitHit(logging.Handler):
        def emit(self, record):
            if "recompile_limit" in record.getMessage():
                hit.append(record.getMessage())

    logging.getLogger("torch._dynamo").addHandler(LimitHit())
    for name in opts.archs.split(","):
        arch, extra = ARCHS[name]
        torch._dynamo.reset()
        counters.clear()
        calls[0], hit[:] = 0, []
        flags = ["--attn-backend", "flex", "--attention-dropout", "0"]
        if patch:
            compiled = torch.compile(torch_flex.flex_attention, backend=counting)
            flex.kernel = lambda q, *a, **k: compiled
        else:
            flags += ["--attn-flex-compile", opts.compile]
            flex.COMPILE_BACKENDS[opts.compile] = counting
            flex._compiled.clear()
        d = toy_dictionary()
        if device.type == "cuda":  # inductor's flex kernel needs a head dimension >= 16
            flags += ["--encoder-embed-dim", "64", "--decoder-embed-dim", "64"]
        model, _, _ = build_model(arch, flags + extra, dictionary=d)
        model = model.to(device=device, dtype=dtype).train(opts.train)
        reference = None
        if opts.train:  # the same weights on the explicit path
            reference = copy.deepcopy(model)
            for m in reference.modules():
                if isinstance(m, SelfAttention):
                    m.backend = "explicit"
        start = time.perf_counter()
        error = None
        with torch.set_grad_enabled(opts.train):
            for n, lens in enumerate(SHAPES):
                src, src_len = token_batch(lens, d, seed=n)
                prev, _ = token_batch([max(2, x - 1) for x in lens], d, left_pad=False, seed=50 + n)
                src, src_len, prev = src.to(device), src_len.to(device), prev.to(device)
                out = model(src, src_len, prev)[0]
                if opts.train:
                    out.float().square().mean().backward()
                    if n == 0:
                        error = _relative_error(model, reference, src, src_len, prev, out)
                    model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        print(f"{name}: graphs installed {counters['stats']['unique_graphs']}, backend calls "
              f"{calls[0]}, graph breaks {sum(counters['graph_break'].values())}, "
              f"recompile limit hit {bool(hit)}, {seconds:.1f} s for {len(SHAPES)} batches"
              + ("" if error is None else f", first batch vs explicit: rel. error output "
                 f"{error[0]:.1e}, parameter gradients {error[1]:.1e}"), flush=True)


def _relative_error(model, reference, src, src_len, prev, out):
    """||flex - explicit|| / ||explicit|| of the output and of all parameter gradients."""
    ref = reference(src, src_len, prev)[0]
    ref.float().square().mean().backward()
    grads = [(p.grad.float(), r.grad.float()) for p, r in zip(model.parameters(), reference.parameters())
             if p.grad is not None and r.grad is not None]
    reference.zero_grad(set_to_none=True)
    g_err = (sum(float((a - b).norm()) ** 2 for a, b in grads) ** 0.5
             / max(sum(float(b.norm()) ** 2 for _, b in grads) ** 0.5, 1e-30))
    return float((out.float() - ref.float()).norm() / ref.float().norm()), g_err


if __name__ == "__main__":
    main()
