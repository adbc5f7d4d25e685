"""Inference speed: fairseq's SequenceGenerator, beam 4, same forced output lengths."""

import torch

from .data import make_gen_batches
from .systems import STOCK
from .timing import Timer, paired_ratios, summarize, sync_device, interleaved

def bench_infer(models, d, cfg, device, seed, log, tgt_d=None, lengths=None):
    """``tgt_d``: the target's own dictionary (else ``d``); ``lengths``: real pairs' lengths to draw
    the sources from (else WMT-like)."""
    from fairseq.sequence_generator import SequenceGenerator

    tgt_d = d if tgt_d is None else tgt_d
    batches = make_gen_batches(d, cfg["gen_sents"], cfg["gen_batch"], cfg["max_src"], seed, device, lengths)
    nsent = sum(b["nsentences"] for b in batches)
    # Untrained (or barely trained) models emit EOS at once. To decode a WMT-like and
    # identical number of steps in every system, each batch's generator forces the
    # output length to the batch's longest source: match_source_len caps it there and
    # min_len forbids an earlier EOS.
    gens = {name: [SequenceGenerator([m], tgt_d, beam_size=4, match_source_len=True,
                                     min_len=int(b["net_input"]["src_lengths"].max()))
                   for b in batches]
            for name, m in models.items()}
    out_len = {}

    def generate(name):
        total = 0
        with torch.no_grad():
            for gen, b in zip(gens[name], batches):
                hyps = gen.generate([models[name]], b)
                total += sum(len(h[0]["tokens"]) for h in hyps)
        out_len[name] = total / nsent

    for name, m in models.items():
        m.eval()
        generate(name)  # warm-up
    sync_device(device)

    def measure(name, r):
        timer = Timer(device).start()
        generate(name)
        return nsent / timer.stop()

    log(f"inference: {nsent} sentences, beam 4")
    runs = interleaved(list(models), cfg["repeats"], measure, log)
    out = {"sentences": nsent, "beam": 4, "rounds": cfg["repeats"], "systems": {}}
    for name in models:
        out["systems"][name] = {"sentences_per_s": summarize(runs[name]),
                                "ratio": paired_ratios(runs[name], runs[STOCK]),
                                "mean_output_len": out_len[name]}
    for m in models.values():
        m.train()
    return out


