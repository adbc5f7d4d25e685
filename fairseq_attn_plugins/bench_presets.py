"""What fairseq-attn-bench's command line chooses from, without torch (the command reads its
arguments before it imports torch and fairseq): the size presets, the dtypes' names, the modes.
The benchmark (:mod:`fairseq_attn_plugins.bench`) takes them from here."""

# tiny: CI smoke test; small: CPU; bible: the bible recipe's CPU model; base/big: GPU
# (fairseq's own sizes). ``tgt_vocab``: a target dictionary of its own (else one shared);
# ``model``: model flags beside the sizes.
PRESETS = {
    "tiny": dict(sizes=dict(embed=16, ffn=32, heads=4, layers=3), vocab=64, max_tokens=96,
                 n_batches=1, passes=1, repeats=2, gen_sents=2, gen_batch=2, max_len_b=2, max_src=12,
                 sweep_lengths=(8, 16), sweep_tokens=32, sweep_steps=1),
    "small": dict(sizes=dict(embed=256, ffn=1024, heads=4, layers=3), vocab=8000, max_tokens=1024,
                  n_batches=4, passes=1, repeats=3, gen_sents=16, gen_batch=16, max_len_b=10, max_src=64,
                  sweep_lengths=(32, 64, 128, 256, 512), sweep_tokens=2048, sweep_steps=2),
    # the recipes' profile "bible" (fairseq_attn_recipes/profiles.py; a test holds them equal): 3+3 layers,
    # dim 128, 2048-token batches, dropout 0.2, the decoder's input and output embeddings shared; the
    # vocabularies and longest pair (80 / 83 tokens) of its prepared data-bin (4000 BPE merges; --data-bin
    # reads a data-bin's own)
    "bible": dict(sizes=dict(embed=128, ffn=256, heads=4, layers=3), vocab=4136, tgt_vocab=3792,
                  model=dict(dropout=0.2, share_all_embeddings=False, share_decoder_input_output_embed=True),
                  max_tokens=2048, n_batches=8, passes=1, warmup=1, repeats=7, gen_sents=16, gen_batch=16,
                  max_len_b=10, max_src=84, sweep_lengths=(32, 64, 128), sweep_tokens=2048, sweep_steps=2),
    # GPU: 4096-token batches x update-freq 4 (16K tokens per optimizer step, as the WMT
    # recipes), 2 warm-up passes, 7 interleaved rounds timed with CUDA events
    "base": dict(sizes=None, big=False, vocab=32768, max_tokens=4096, update_freq=4, n_batches=16,
                 passes=2, warmup=2, repeats=7, gen_sents=256, gen_batch=128, max_len_b=10, max_src=250,
                 sweep_lengths=(32, 64, 128, 256, 512, 1024), sweep_tokens=16384, sweep_steps=20),
    "big": dict(sizes=None, big=True, vocab=32768, max_tokens=4096, update_freq=4, n_batches=16,
                passes=1, warmup=2, repeats=7, gen_sents=128, gen_batch=128, max_len_b=10, max_src=250,
                sweep_lengths=(32, 64, 128, 256, 512, 1024), sweep_tokens=16384, sweep_steps=20),
}
#: the dtypes of the measurements, by name (:data:`fairseq_attn_plugins.bench.systems.DTYPES`: torch's)
DTYPE_NAMES = ("fp32", "fp16", "bf16")
#: --mode (besides numerics): train + inference, the length sweep, both, stock base vs big
MODES = ("train", "sweep", "all", "scaling")
