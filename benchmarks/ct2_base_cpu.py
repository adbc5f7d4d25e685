"""CPU inference at Transformer-base size: fairseq-generate vs CTranslate2, and the
incremental-decoding cost of each position / decoder piece under fairseq-generate.

    python benchmarks/ct2_base_cpu.py [--work DIR] [--rounds 7] [--threads 2] [--sentences 16]
        [--length 10] [--beam 4] [--train-minutes 6] [--demo-dim 128] [--json FILE]

Speed (untrained models: the work is forced, so the weights do not matter):

* Transformer-base dimensions (512, 6 + 6 layers, 8 heads, FFN 2048), a joined vocabulary of
  32,000 symbols (the toy corpus's words and fillers), shared embeddings; untrained models
  (initialised as fairseq-train initialises them, seed 1) saved as fairseq checkpoints;
* every engine decodes the same ``--sentences`` toy test sentences, beam ``--beam``, batches
  of ``--sentences``, with exactly ``--length`` + 1 decoder steps per sentence
  (fairseq-generate: ``--min-len L --max-len-a 0 --max-len-b L``, L words then the forced
  ``</s>``; CTranslate2: ``min_decoding_length = max_decoding_length = L + 1``), so an untrained
  model does the work a trained one would;
* engines: fairseq-generate's decoding loop run in this process (each model loaded once; the
  task's test batches, the generator built from fairseq-generate's flags, timed over
  ``task.inference_step`` as fairseq-generate's own timer is; ``torch.set_num_threads``) and
  CTranslate2 ``float32``, ``int8``, ``int8_float32`` and ``int8`` with a vocabulary map
  (``use_vmap``; ``intra_threads``), all on ``--threads`` threads; the CTranslate2 model is the
  stock Transformer exported with ``fairseq-attn-export --to ct2``;
* pieces: fairseq-generate of ``transformer_<piece>_wmt_en_de`` for relpos, rope, alibi,
  t5bias, chained and dpi against stock fairseq's ``transformer_wmt_en_de``;
* every system runs once per round for ``--rounds`` rounds (interleaved: neighbours in time
  see the same machine load), each round starting one system later (no system always runs
  first or after the same neighbour); a ratio is taken within a round and reported as the
  median over rounds with its spread (min..max). ``OMP_WAIT_POLICY=PASSIVE``: torch and
  CTranslate2 each bring an OpenMP runtime, whose spinning idle threads would otherwise take
  the cores of the engine running next.

The vocabulary map: each toy source word maps to the target words that co-occur with it in
the toy training pairs, plus 2,000 always-included filler symbols standing in for the few
thousand candidates a real map keeps for a batch (the toy corpus has only ~190 words, so a
map of its own words alone would overstate the gain at 32k).

int8 quality: ``transformer_relpos_wmt_en_de`` at ``--demo-dim`` dimensions (default 128; 3 + 3
layers, 4 heads, FFN 4 x dim), trained for ``--train-minutes`` of wall clock on the offline demo's toy pair (4000
pairs), exported; sacreBLEU of fairseq-generate and of CTranslate2 float32 / int8 /
int8_float32 on its 400 test sentences (beam 4, length penalty 1.0).
"""

import os

# torch and CTranslate2 each bring an OpenMP runtime into this process: threads that spin
# while waiting would take the other engine's cores (2 here); let them sleep instead
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import collections  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from fairseq_attn_records.output_files import staged, write_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN = os.path.join(ROOT, "fairseq_attn_plugins")
VOCAB = 32000
FIXED_VMAP = 2000
PIECES = ["relpos", "rope", "alibi", "t5bias", "chained", "dpi"]
CT2_CONFIGS = [("float32", False), ("int8", False), ("int8_float32", False), ("int8", True)]


def sh(cmd, env=None, log=None):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if log:
        with open(log, "w", encoding="utf-8") as f:
            f.write(p.stdout)
    if p.returncode:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}")
    return p.stdout


def threads_env(threads):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "rounds": values}


def write_joined_dict(corpus, path):
    """The toy corpus's words, then fillers up to VOCAB symbols (fairseq adds 4 specials)."""
    counts = collections.Counter()
    for name in os.listdir(corpus):
        with open(os.path.join(corpus, name), encoding="utf-8") as f:
            for line in f:
                counts.update(line.split())
    words = [w for w, _ in counts.most_common()]
    fillers = [f"w{i:05d}" for i in range(VOCAB - 4 - len(words))]
    with open(path, "w", encoding="utf-8") as f:
        for w in words:
            f.write(f"{w} {counts[w]}\n")
        for w in fillers:
            f.write(f"{w} 1\n")
    return fillers


def write_vmap(corpus, fillers, path):
    cooc = collections.defaultdict(set)
    with open(os.path.join(corpus, "train.src"), encoding="utf-8") as fs, \
            open(os.path.join(corpus, "train.tgt"), encoding="utf-8") as ft:
        for s, t in zip(fs, ft):
            for w in s.split():
                cooc[w].update(t.split())
    with open(path, "w", encoding="utf-8") as f:
        f.write("\t" + " ".join(fillers[:FIXED_VMAP]) + "\n")  # always included
        for w, targets in sorted(cooc.items()):
            f.write(f"{w}\t{' '.join(sorted(targets))}\n")


def base_data(work, sentences):
    from fairseq_attn_records.toy_corpus import write_corpus

    corpus, data = os.path.join(work, "corpus_base"), os.path.join(work, "bin_base")
    if os.path.isfile(os.path.join(data, "dict.src.txt")):
        return corpus, data, None
    write_corpus(corpus, sizes=(("train", 4000), ("valid", 64), ("test", sentences)))
    dict_path = os.path.join(work, "dict.joined32k.txt")
    fillers = write_joined_dict(corpus, dict_path)
    sh([sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "src", "--target-lang", "tgt",
        "--trainpref", f"{corpus}/valid", "--testpref", f"{corpus}/test", "--destdir", data,
        "--srcdict", dict_path, "--tgtdict", dict_path, "--workers", "1"])
    return corpus, data, fillers


def base_checkpoint(work, data, system):
    """An untrained (freshly initialised, seed 1) Transformer-base ``system`` (stock or a
    piece) in fairseq's checkpoint format, built in this process as fairseq-train builds it."""
    arch = "transformer_wmt_en_de" if system == "stock" else f"transformer_{system}_wmt_en_de"
    return untrained_checkpoint(os.path.join(work, f"base_{system}"), data, arch, ["--share-all-embeddings"])


def untrained_checkpoint(save, data, arch, flags):
    """``save/checkpoint_last.pt``: ``arch`` with ``flags``, freshly initialised (seed 1), in
    fairseq's checkpoint format, built as fairseq-train builds it (reused when it exists)."""
    ck = os.path.join(save, "checkpoint_last.pt")
    if os.path.isfile(ck):
        return ck
    import torch
    from fairseq import checkpoint_utils, options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    args = options.parse_args_and_arch(options.get_training_parser(), [
        data, "--user-dir", PLUGIN, "--arch", arch, *flags, "--cpu", "--seed", "1",
        "--optimizer", "adam", "--lr", "1e-3", "--criterion", "label_smoothed_cross_entropy"])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(1)
    model = task.build_model(cfg.model)
    os.makedirs(save, exist_ok=True)
    state = {"args": None, "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
             "model": model.state_dict(), "criterion": None,
             "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion",
                                    "optimizer_name": "FairseqAdam", "lr_scheduler_state": {},
                                    "num_updates": 0}],
             "task_state": {}, "extra_state": {}, "last_optimizer_state": None}
    with staged(ck) as tmp:
        checkpoint_utils.torch_persistent_save(state, tmp)
    return ck


def fairseq_generate(data, ck, threads, beam, batch, lenpen=1.0, log=None):
    """fairseq-generate (a subprocess): (hypotheses by id, sources by id, its sentences/s)."""
    limits = ["--max-len-a", "0", "--max-len-b", "200"]
    text = sh([sys.executable, "-m", "fairseq_cli.generate", data, "--user-dir", PLUGIN, "--path", ck,
               "--gen-subset", "test", "--beam", str(beam), "--lenpen", str(lenpen), *limits,
               "--batch-size", str(batch), "--required-batch-size-multiple", "1", "--cpu",
               "--num-workers", "0"], env=threads_env(threads), log=log)
    hyps, src = {}, {}
    for line in text.splitlines():
        if line.startswith("H-"):
            head, _score, hyp = line.split("\t", 2)
            hyps[int(head[2:])] = hyp
        elif line.startswith("S-"):
            head, s = line.split("\t", 1)
            src[int(head[2:])] = s
    m = re.search(r"Translated ([\d,]+) sentences .* in ([\d.]+)s \(([\d.]+) sentences/s", text)
    return hyps, src, float(m.group(3))


def export(data, ck, out):
    if not os.path.isdir(out):
        sh(["fairseq-attn-export", data, "--path", ck, "--to", "ct2", "--output-dir", out, "--force"])
    return out


class FairseqGenerate:
    """fairseq-generate's decoding loop in this process, the model loaded once: the task's
    test batches, its generator built from fairseq-generate's own flags, and the span its
    "Translated N sentences ... sentences/s" timer covers (``task.inference_step``)."""

    def __init__(self, data, ck, beam, length, batch):
        from fairseq import options
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        from fairseq_attn_plugins.loading import load_model_ensemble_and_task

        args = options.parse_args_and_arch(options.get_generation_parser(), [
            data, "--user-dir", PLUGIN, "--path", ck, "--gen-subset", "test", "--beam", str(beam),
            "--min-len", str(length), "--max-len-a", "0", "--max-len-b", str(length),
            "--batch-size", str(batch), "--required-batch-size-multiple", "1", "--cpu",
            "--num-workers", "0"])
        cfg = convert_namespace_to_omegaconf(args)
        models, _, task = load_model_ensemble_and_task([ck], {"data": data})
        self.models = [m.eval() for m in models]
        self.task = task
        task.load_dataset("test", task_cfg=cfg.task)
        itr = task.get_batch_iterator(dataset=task.dataset("test"), max_sentences=batch,
                                      required_batch_size_multiple=1, num_workers=0)
        self.batches = list(itr.next_epoch_itr(shuffle=False))
        self.generator = task.build_generator(self.models, cfg.generation)

    def run(self):
        """(sentences/s, the hypotheses' lengths without </s>)."""
        import torch

        n, lengths, t = 0, set(), time.perf_counter()
        with torch.no_grad():
            for sample in self.batches:
                hyps = self.task.inference_step(self.generator, self.models, sample)
                n += len(hyps)
                lengths.update(len(h[0]["tokens"]) - 1 for h in hyps)
        return n / (time.perf_counter() - t), lengths


def speed_part(a, results):
    import ctranslate2
    import torch

    torch.set_num_threads(a.threads)
    corpus, data, fillers = base_data(a.work, a.sentences)
    systems = ["stock"] + PIECES
    t0 = time.time()
    cks = {s: base_checkpoint(a.work, data, s) for s in systems}
    ct2_dir = export(data, cks["stock"], os.path.join(a.work, "base_stock.ct2"))
    if fillers is not None or not os.path.isfile(os.path.join(ct2_dir, "vmap.txt")):
        fillers = fillers or [f"w{i:05d}" for i in range(FIXED_VMAP)]
        write_vmap(corpus, fillers, os.path.join(ct2_dir, "vmap.txt"))
    L, steps = a.length, a.length + 1
    fairseq = {s: FairseqGenerate(data, cks[s], a.beam, L, a.sentences) for s in systems}
    print(f"base models ready ({time.time() - t0:.0f} s)", flush=True)
    src_tokens = [b["net_input"]["src_tokens"] for b in fairseq["stock"].batches]
    d = fairseq["stock"].task.source_dictionary
    pad = d.pad()
    src = [[d[int(t)] for t in row if int(t) != pad][:-1] for b in src_tokens for row in b]  # no </s>
    n = len(src)
    translators = {ct: ctranslate2.Translator(ct2_dir, device="cpu", compute_type=ct, inter_threads=1,
                                              intra_threads=a.threads)
                   for ct in sorted({ct for ct, _ in CT2_CONFIGS})}

    def ct2(ct, vmap):
        t = time.perf_counter()
        res = translators[ct].translate_batch(src, beam_size=a.beam, min_decoding_length=steps,
                                              max_decoding_length=steps, max_batch_size=a.sentences,
                                              use_vmap=vmap)
        dt = time.perf_counter() - t
        lengths = {len(r.hypotheses[0]) for r in res}
        assert lengths == {steps}, f"CTranslate2 {ct}: output lengths {lengths}, want {steps}"
        return n / dt

    ct2_names = [f"ct2_{ct}" + ("_vmap" if vmap else "") for ct, vmap in CT2_CONFIGS]
    speed = {name: [] for name in ["fairseq_" + s for s in systems] + ct2_names}
    for s in systems:  # warm-up (first calls allocate)
        fairseq[s].run()
    for cfg in CT2_CONFIGS:
        ct2(*cfg)
    order = list(speed)
    for r in range(a.rounds):
        # each round starts one system later: no system always runs first, or right after another
        for name in order[r % len(order):] + order[:r % len(order)]:
            if name.startswith("fairseq_"):
                sps, lengths = fairseq[name[len("fairseq_"):]].run()
                assert lengths == {L}, (name, lengths)  # L words, then the forced </s>
                speed[name].append(sps)
            else:
                speed[name].append(ct2(*CT2_CONFIGS[ct2_names.index(name)]))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in speed.items()), flush=True)
    base = speed["fairseq_stock"]
    results["speed"] = {
        "sentences": n, "decoder_steps_per_sentence": steps, "beam": a.beam, "batch": a.sentences,
        "threads": a.threads, "vocabulary": VOCAB, "vmap_fixed_candidates": FIXED_VMAP,
        "sentences_per_s": {k: spread(v) for k, v in speed.items()},
        "target_tokens_per_s": {k: spread([x * steps for x in v]) for k, v in speed.items()},
        "ratio_to_fairseq_stock": {k: spread([x / b for x, b in zip(v, base)])
                                   for k, v in speed.items() if k != "fairseq_stock"},
        "ratio_to_ct2_float32": {k: spread([x / f for x, f in zip(speed[k], speed["ct2_float32"])])
                                 for k in ct2_names if k != "ct2_float32"},
    }


def bleu_part(a, results):
    import ctranslate2
    import sacrebleu

    from fairseq_attn_records.toy_corpus import write_corpus

    corpus, data = os.path.join(a.work, "corpus_demo"), os.path.join(a.work, "bin_demo")
    if not os.path.isfile(os.path.join(data, "dict.src.txt")):
        write_corpus(corpus, sizes=(("train", 4000), ("valid", 200), ("test", 400)))
        sh([sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "src", "--target-lang", "tgt",
            "--trainpref", f"{corpus}/train", "--validpref", f"{corpus}/valid", "--testpref",
            f"{corpus}/test", "--destdir", data, "--joined-dictionary", "--workers", "1"])
    save = os.path.join(a.work, f"demo_relpos{a.demo_dim}")
    ck = os.path.join(save, "checkpoint_last.pt")
    if not os.path.isfile(ck):
        t0 = time.time()
        sh([sys.executable, "-m", "fairseq_cli.train", data, "--user-dir", PLUGIN,
            "--arch", "transformer_relpos_wmt_en_de", "--encoder-layers", "3", "--decoder-layers", "3",
            "--encoder-embed-dim", str(a.demo_dim), "--decoder-embed-dim", str(a.demo_dim),
            "--encoder-ffn-embed-dim", str(4 * a.demo_dim), "--decoder-ffn-embed-dim", str(4 * a.demo_dim),
            "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--share-all-embeddings",
            "--dropout", "0.1", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "3e-3",
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "60", "--criterion",
            "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", "1500",
            "--max-update", "100000", "--stop-time-hours", str(a.train_minutes / 60), "--cpu",
            "--num-workers", "0", "--seed", "1", "--save-dir", save, "--no-epoch-checkpoints",
            "--no-save-optimizer-state", "--disable-validation", "--save-interval-updates", "100000",
            "--log-format", "simple", "--log-interval", "50"],
           env=threads_env(a.threads), log=os.path.join(a.work, "train_demo.log"))
        print(f"demo model trained ({time.time() - t0:.0f} s)", flush=True)
    import torch

    state = torch.load(ck, map_location="cpu", weights_only=False)  # our own checkpoint
    updates = state["optimizer_history"][-1]["num_updates"]
    del state
    out = export(data, ck, os.path.join(a.work, f"demo_relpos{a.demo_dim}.ct2"))
    hyps, src_lines, _ = fairseq_generate(data, ck, a.threads, 4, 64, log=os.path.join(a.work, "gen_demo.log"))
    n = len(hyps)
    ref = [line.rstrip("\n") for line in open(os.path.join(corpus, "test.tgt"), encoding="utf-8")]
    assert n == len(ref) == 400
    src = [src_lines[i].split() for i in range(n)]
    bleu = {"fairseq": sacrebleu.corpus_bleu([hyps[i] for i in range(n)], [ref]).score}
    differ = {}
    for ct in ("float32", "int8", "int8_float32"):
        tr = ctranslate2.Translator(out, device="cpu", compute_type=ct, intra_threads=a.threads)
        res = tr.translate_batch(src, beam_size=4, length_penalty=1.0, max_decoding_length=200,
                                 max_batch_size=64)
        text = [" ".join(r.hypotheses[0]) for r in res]
        bleu[f"ct2_{ct}"] = sacrebleu.corpus_bleu(text, [ref]).score
        differ[f"ct2_{ct}"] = sum(t != hyps[i] for i, t in enumerate(text))
    results["int8_quality"] = {
        "model": f"transformer_relpos_wmt_en_de, {a.demo_dim} dims, 3+3 layers, 4 heads, FFN "
                 f"{4 * a.demo_dim}, shared embeddings, toy demo pair (4000 training pairs)",
        "train_minutes_budget": a.train_minutes, "updates": updates, "test_sentences": n,
        "bleu": bleu, "differing_from_fairseq": differ,
        "bleu_change_vs_ct2_float32": {k: bleu[k] - bleu["ct2_float32"]
                                       for k in ("ct2_int8", "ct2_int8_float32")},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="ct2_base_bench")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=16)
    ap.add_argument("--length", type=int, default=10)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--train-minutes", type=float, default=6.0)
    ap.add_argument("--demo-dim", type=int, default=128)
    ap.add_argument("--skip-bleu", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import ctranslate2
    import torch

    os.makedirs(a.work, exist_ok=True)
    t0 = time.time()
    results = {"ctranslate2": ctranslate2.__version__, "torch": torch.__version__,
               "command": " ".join(sys.argv), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
               "load_average_at_start": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    speed_part(a, results)
    if not a.skip_bleu:
        bleu_part(a, results)
    results["load_average_at_end"] = os.getloadavg()
    results["wall_s"] = round(time.time() - t0)
    print(json.dumps(results, indent=1))
    if a.json:
        write_json(a.json, results, indent=1)


if __name__ == "__main__":
    main()
