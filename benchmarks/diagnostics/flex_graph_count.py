"""How many graphs torch.compile(flex_attention) installs over many batch shapes (CPU).

A 2+2-layer model of each flex-path architecture runs its whole forward (encoder and
teacher-forced decoder, as ``fairseq-generate --score-reference``) over 11 batch shapes
with ``--attn-backend flex`` and ``--attn-flex-compile aot_eager``: dynamo's capture and
guards, which decide how often CUDA compiles, without inductor. Prints the graphs dynamo
installed (``unique_graphs``), the backend calls (restarts included), graph breaks and
whether the recompile limit was hit.

    python benchmarks/diagnostics/flex_graph_count.py            # this tree
    python benchmarks/diagnostics/flex_graph_count.py --patch    # a tree without the flag
                                                                 # (wraps flex.kernel itself)
"""

import logging
import os
import sys
import warnings

import torch
import torch._dynamo
import torch.nn.attention.flex_attention as torch_flex
from torch._dynamo.utils import counters

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
from attn_helpers import build_model, token_batch, toy_dictionary  # noqa: E402

from fairseq_attn_plugins.attention.backends import flex  # noqa: E402

ARCHS = {"relpos_kv": ("transformer_relpos_wmt_en_de", []),
         "relpos_tied": ("transformer_relpos_wmt_en_de", ["--relpos-mode", "tied"]),
         "alibi": ("transformer_alibi_wmt_en_de", []),
         "csan1d": ("transformer_csan1d_wmt_en_de", ["--csan-layers", "0-1"]),
         "csan2d": ("transformer_csan2d_wmt_en_de", ["--csan-layers", "0-1"])}
SHAPES = [[5, 3], [7, 7, 2], [9], [4, 4, 4, 4], [12, 3, 8], [6, 2], [15, 11], [3], [10, 10],
          [8, 1, 5, 7], [13, 2, 2]]


def main():
    warnings.filterwarnings("ignore")
    patch = "--patch" in sys.argv
    calls = [0]
    aot_eager = torch._dynamo.lookup_backend("aot_eager")

    def counting(gm, example_inputs):
        calls[0] += 1
        return aot_eager(gm, example_inputs)

    hit = []

    class LimitHit(logging.Handler):
        def emit(self, record):
            if "recompile_limit" in record.getMessage():
                hit.append(record.getMessage())

    logging.getLogger("torch._dynamo").addHandler(LimitHit())
    for name, (arch, extra) in ARCHS.items():
        torch._dynamo.reset()
        counters.clear()
        calls[0], hit[:] = 0, []
        flags = ["--attn-backend", "flex", "--attention-dropout", "0"]
        if patch:
            compiled = torch.compile(torch_flex.flex_attention, backend=counting)
            flex.kernel = lambda q, *a, **k: compiled
        else:
            flags += ["--attn-flex-compile", "aot_eager"]
            flex.COMPILE_BACKENDS["aot_eager"] = counting
            flex._compiled.clear()
        d = toy_dictionary()
        model, _, _ = build_model(arch, flags + extra, dictionary=d)
        model.eval()
        with torch.no_grad():
            for n, lens in enumerate(SHAPES):
                src, src_len = token_batch(lens, d, seed=n)
                prev, _ = token_batch([max(2, x - 1) for x in lens], d, left_pad=False, seed=50 + n)
                model(src, src_len, prev)
        print(f"{name}: graphs installed {counters['stats']['unique_graphs']}, backend calls "
              f"{calls[0]}, graph breaks {sum(counters['graph_break'].values())}, "
              f"recompile limit hit {bool(hit)}", flush=True)


if __name__ == "__main__":
    main()
