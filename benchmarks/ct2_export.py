"""CTranslate2 export vs fairseq-generate on a trained small model (CPU).

    python benchmarks/ct2_export.py [--work DIR] [--arch transformer_relpos_wmt_en_de]
        [--threads 2] [--rounds 3] [--json benchmarks/results/ct2_export.json]

1. trains ``--arch`` (64-dim, 3+2 layers, 4 heads) on the offline demo's toy pair (4000
   training pairs, 400 test sentences; reused if present);
2. exports it with ``fairseq-attn-export --to ct2`` (float32);
3. float32: CTranslate2's beam-4 translations of the test set against ``fairseq-generate``'s
   (same beam, length penalty and maximum length; BPE tokens compared), sentence by sentence;
   differing sentences are listed with both engines' scores;
4. int8 (``compute_type="int8"``): sacreBLEU of both against the reference;
5. speed: sentences/s of fairseq-generate (its own timer, model loading excluded) and
   CTranslate2 float32 / int8 (``translate_batch`` over the test set, loading excluded), on the
   same number of CPU threads, interleaved in ``--rounds`` rounds: ratios per round, their
   median and spread (min..max).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

from fairseq_attn_records.output_files import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(cmd, env=None, log=None):
    with open(log or os.devnull, "w", encoding="utf-8") as f:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        f.write(p.stdout)
    if p.returncode:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}")
    return p.stdout


def fairseq_generate(data, ck, threads, beam, lenpen, batch, out_log):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    text = sh([sys.executable, "-m", "fairseq_cli.generate", data, "--user-dir",
               os.path.join(ROOT, "fairseq_attn_plugins"), "--path", ck, "--gen-subset", "test",
               "--beam", str(beam), "--lenpen", str(lenpen), "--max-len-a", "0", "--max-len-b", "200",
               "--batch-size", str(batch), "--required-batch-size-multiple", "1", "--cpu",
               "--num-workers", "0"], env=env, log=out_log)
    hyps, scores, src = {}, {}, {}
    for line in text.splitlines():
        if line.startswith("H-"):
            head, score, hyp = line.split("\t", 2)
            hyps[int(head[2:])], scores[int(head[2:])] = hyp, float(score)
        elif line.startswith("S-"):
            head, s = line.split("\t", 1)
            src[int(head[2:])] = s
    m = re.search(r"Translated ([\d,]+) sentences .* in ([\d.]+)s \(([\d.]+) sentences/s", text)
    return hyps, scores, src, float(m.group(3))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="ct2_bench")
    ap.add_argument("--arch", default="transformer_relpos_wmt_en_de")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--lenpen", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--updates", type=int, default=300)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import ctranslate2
    import sacrebleu

    data = os.path.join(a.work, "data-bin")
    corpus = os.path.join(a.work, "corpus")
    if not os.path.isfile(os.path.join(data, "dict.src.txt")):
        from fairseq_attn_records.toy_corpus import write_corpus

        write_corpus(corpus, sizes=(("train", 4000), ("valid", 200), ("test", 400)))
        sh([sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "src", "--target-lang", "tgt",
            "--trainpref", f"{corpus}/train", "--validpref", f"{corpus}/valid", "--testpref",
            f"{corpus}/test", "--destdir", data, "--joined-dictionary", "--workers", "1"])
    save = os.path.join(a.work, "run_" + a.arch)
    ck = os.path.join(save, "checkpoint_last.pt")
    if not os.path.isfile(ck):
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
        sh([sys.executable, "-m", "fairseq_cli.train", data, "--user-dir", os.path.join(ROOT, "fairseq_attn_plugins"),
            "--arch", a.arch, "--encoder-layers", "3", "--decoder-layers", "2", "--encoder-embed-dim", "64",
            "--decoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128",
            "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--share-all-embeddings",
            "--dropout", "0.1", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "3e-3",
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "60", "--criterion",
            "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", "1500",
            "--max-update", str(a.updates), "--cpu", "--num-workers", "0", "--seed", "1", "--save-dir", save,
            "--no-epoch-checkpoints", "--disable-validation", "--log-format", "simple", "--log-interval", "10"],
           env=env, log=os.path.join(a.work, "train.log"))
    out = os.path.join(a.work, a.arch + ".ct2")
    sh(["fairseq-attn-export", data, "--path", ck, "--to", "ct2", "--output-dir", out, "--force"])
    ref = [line.rstrip("\n") for line in open(os.path.join(corpus, "test.tgt"), encoding="utf-8")]

    translators = {ct: ctranslate2.Translator(out, device="cpu", compute_type=ct, inter_threads=1,
                                              intra_threads=a.threads) for ct in ("float32", "int8")}
    gen_log = os.path.join(a.work, "generate.out")
    hyps, scores, src_lines, _ = fairseq_generate(data, ck, a.threads, a.beam, a.lenpen, a.batch, gen_log)
    n = len(ref)
    assert sorted(hyps) == list(range(n)), (len(hyps), n)
    src = [src_lines[i].split() for i in range(n)]

    def ct2(ct):
        t0 = time.perf_counter()
        res = translators[ct].translate_batch(src, beam_size=a.beam, length_penalty=a.lenpen,
                                              max_decoding_length=200, max_batch_size=a.batch,
                                              return_scores=True)
        return res, n / (time.perf_counter() - t0)

    f32, _ = ct2("float32")
    differ = []
    for i, r in enumerate(f32):
        got = " ".join(r.hypotheses[0])
        if got != hyps[i]:
            differ.append({"id": i, "fairseq": hyps[i], "ct2": got, "fairseq_score_log2": scores[i],
                           "ct2_score_log2": r.scores[0] / 0.6931471805599453})
    i8, _ = ct2("int8")
    bleu = {
        "fairseq": sacrebleu.corpus_bleu([(hyps[i]) for i in range(n)], [ref]).score,
        "ct2_float32": sacrebleu.corpus_bleu([(" ".join(r.hypotheses[0])) for r in f32], [ref]).score,
        "ct2_int8": sacrebleu.corpus_bleu([(" ".join(r.hypotheses[0])) for r in i8], [ref]).score,
    }

    speed = {"fairseq": [], "ct2_float32": [], "ct2_int8": []}
    for r in range(a.rounds):  # interleaved: the three engines see the same machine state
        speed["fairseq"].append(fairseq_generate(data, ck, a.threads, a.beam, a.lenpen, a.batch, gen_log)[3])
        speed["ct2_float32"].append(ct2("float32")[1])
        speed["ct2_int8"].append(ct2("int8")[1])
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f} sent/s" for k, v in speed.items()), flush=True)
    ratios = {k: [c / f for c, f in zip(speed[k], speed["fairseq"])] for k in ("ct2_float32", "ct2_int8")}
    result = {
        "arch": a.arch, "sentences": n, "beam": a.beam, "lenpen": a.lenpen, "threads": a.threads,
        "batch": a.batch, "ctranslate2": ctranslate2.__version__,
        "float32_differing": len(differ), "float32_differences": differ, "bleu": bleu,
        "int8_bleu_delta": bleu["ct2_int8"] - bleu["fairseq"],
        "sentences_per_s": speed,
        "ratio_to_fairseq": {k: {"median": statistics.median(v), "min": min(v), "max": max(v), "rounds": v}
                             for k, v in ratios.items()},
    }
    print(json.dumps({k: v for k, v in result.items() if k != "float32_differences"}, indent=1))
    if a.json:
        write_json(a.json, result, indent=1)


if __name__ == "__main__":
    main()
