"""Small builders shared by the tests (not a test module)."""

import argparse
import copy
import functools

import torch

from fairseq_attn_records.fairseq_import import import_fairseq

# fairseq imported as the commands import it, without scikit-learn and scipy.stats, which no test
# here calls (~1 s of CPU less per pytest process; nothing is imported if fairseq already is)
import_fairseq()
from fairseq.data import Dictionary  # noqa: E402
from torch.testing import assert_close

import fairseq_attn_plugins  # noqa: F401  (registers models and pieces)
from fairseq_attn_core import (
    AttentionSite,
    SelfAttention,
    attention_defaults,
    build_pieces,
    validate_attention_args,
)


def make_args(pieces="", layers=2, heads=4, **flags):
    args = argparse.Namespace(
        encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads,
        attn_pieces=pieces, **flags,
    )
    attention_defaults(args)
    validate_attention_args(args)
    return args


def seed_cpu(n: int) -> None:
    """torch's global CPU generator seeded with ``n``: what ``torch.manual_seed(n)`` does for
    these CPU tests, without also queueing the seed for each accelerator torch has not
    initialised, which formats the caller's whole stack every call (~0.5 ms under pytest,
    thousands of calls per run)."""
    torch.random.default_generator.manual_seed(n)


def make_attention(args, side="encoder", layer_idx=0, embed_dim=16, num_heads=4,
                   backend=None, seed=0, dropout=0.0, dtype=torch.float32, policy=None):
    """A layer of ``args``' pieces; ``policy`` (backends.Policy) lowers its paths' thresholds
    and block sizes."""
    from fairseq_attn_core import backends

    seed_cpu(seed)
    site = AttentionSite(side=side, layer_idx=layer_idx, num_layers=args.encoder_layers,
                         num_heads=num_heads, head_dim=embed_dim // num_heads)
    attn = SelfAttention(embed_dim, num_heads, site, pieces=build_pieces(args, site),
                               dropout=dropout, backend=backend or args.attn_backend,
                               policy=policy or backends.DEFAULT)
    # give biases non-zero values so that they matter in the comparisons
    with torch.no_grad():
        for name, p in attn.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
    return attn.to(dtype)


def path_name(attn, **call) -> str:
    """The path (:mod:`fairseq_attn_core.backends`) that runs a call of ``attn``:
    'flex piece', 'flex band', 'block-local', 'fused' or 'explicit'."""
    from fairseq_attn_core import backends

    return attn.path_for(backends.Call(**call)).name


def padded_batch(lengths, embed_dim=16, left_pad=True, seed=1, dtype=torch.float32):
    """x (T, B, C) and key_padding_mask (B, T) (True = pad) for sentences of ``lengths``."""
    g = torch.Generator().manual_seed(seed)
    T, B = max(lengths), len(lengths)
    x = torch.randn(T, B, embed_dim, generator=g, dtype=dtype)
    kpm = torch.zeros(B, T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        if left_pad:
            kpm[b, : T - n] = True
        else:
            kpm[b, n:] = True
    return x, kpm


def key_padding(B, T, pads):
    """(B, T) True = pad, or None for ``pads`` None: pads[b] >= 0 pads that many positions on the
    left (fairseq's source), < 0 that many on the right (``--left-pad-source False``)."""
    if pads is None:
        return None
    kpm = torch.zeros(B, T, dtype=torch.bool)
    for b, n in enumerate(pads):
        if n >= 0:
            kpm[b, : min(n, T)] = True
        else:
            kpm[b, T + n:] = True
    return kpm


def real_positions(kpm_row):
    """Indices of the real (non-pad) tokens of one sentence."""
    return [i for i, pad in enumerate(kpm_row.tolist()) if not pad]


def projections64(attn, x):
    """q, k, v in float64 as python-friendly (B, H, T, D) tensors (q not yet scaled)."""
    T, B, C = x.shape
    H, D = attn.num_heads, attn.head_dim
    x64 = x.double()

    def proj(lin):
        y = x64 @ lin.weight.double().t() + lin.bias.double()
        return y.view(T, B, H, D).permute(1, 2, 0, 3)

    return proj(attn.q_proj), proj(attn.k_proj), proj(attn.v_proj)


def output64(attn, heads_out):
    """(B, H, T, D) float64 per-head outputs -> (T, B, C) after out_proj."""
    B, H, T, D = heads_out.shape
    y = heads_out.permute(2, 0, 1, 3).reshape(T, B, H * D)
    return y @ attn.out_proj.weight.double().t() + attn.out_proj.bias.double()


def toy_dictionary(n_symbols=40):
    d = Dictionary()
    for i in range(n_symbols):
        d.add_symbol(f"w{i}")
    d.finalize(padding_factor=8)
    return d


SMALL = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "16",
         "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
         "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "4",
         "--decoder-attention-heads", "4", "--dropout", "0"]


@functools.lru_cache(maxsize=None)
def _parsed(arch, extra):
    """fairseq-train's arguments for ``arch``, parsed once per process (callers copy them)."""
    from fairseq import options
    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, ["/nonexistent", "--arch", arch, "--task", "translation", *SMALL, *extra])


def build_model(arch, extra=(), dictionary=None, seed=0):
    """Build a model of ``arch`` exactly as fairseq-train would, on a toy dictionary."""
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks.translation import TranslationTask

    d = dictionary or toy_dictionary()
    args = copy.deepcopy(_parsed(arch, tuple(extra)))
    task = TranslationTask(args, d, d)
    seed_cpu(seed)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, task), task, args


def token_batch(lengths, dictionary, left_pad=True, seed=3):
    """(B, T) source tokens with fairseq's padding (left by default) and lengths."""
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    rows = []
    for n in lengths:
        toks = torch.randint(dictionary.nspecial, len(dictionary) - 1, (n - 1,), generator=g)
        toks = torch.cat([toks, torch.tensor([dictionary.eos()])])
        pad = torch.full((T - n,), dictionary.pad())
        rows.append(torch.cat([pad, toks]) if left_pad else torch.cat([toks, pad]))
    return torch.stack(rows), torch.tensor(lengths)


def assert_decoder_steps_equal_full(model, src, lengths, prev, **tol):
    """The decoder run a step at a time with its cache equals its teacher-forced full pass."""
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=lengths)
        full, _ = model.decoder(prev, encoder_out=enc)
        state, steps = {}, []
        for t in range(prev.size(1)):
            step, _ = model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
            steps.append(step)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **tol)


def auto_matches_explicit(args, path, init=None, lengths=(9, 5, 7), policy=None, blocks=None):
    """A layer on ``--attn-backend auto`` with ``policy``, which must take ``path`` for
    ``max(lengths)`` positions (in ``blocks`` query blocks, if given), and the same layer on
    the explicit path, in float64 with the same weights (``init(attn)`` sets the piece's,
    seeded): output, input gradient and every parameter gradient of a left-padded batch agree
    (the explicit path's softmax is float32: 1e-5). Returns the auto layer's parameter gradients."""
    T = max(lengths)
    runs = []
    for backend in ("auto", "explicit"):
        attn = make_attention(args, backend=backend, dtype=torch.float64, policy=policy)
        if init is not None:
            with torch.no_grad():
                init(attn)
        assert path_name(attn, tgt_len=T, src_len=T) == (path if backend == "auto" else "explicit")
        x, kpm = padded_batch(list(lengths), dtype=torch.float64)
        x.requires_grad_(True)
        y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
        if backend == "auto" and blocks is not None:
            assert attn.last_run == (path, blocks), attn.last_run
        y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=y.dtype))
        runs.append((y.detach(), x.grad, {n: p.grad for n, p in attn.named_parameters()}))
    (ya, xa, ga), (yb, xb, gb) = runs
    tol = dict(rtol=1e-5, atol=1e-5)
    assert_close(ya, yb, **tol)
    assert_close(xa, xb, **tol)
    assert set(ga) == set(gb)
    for n in ga:
        assert_close(ga[n], gb[n], **tol, msg=lambda m: f"{n}: {m}")
    return ga
