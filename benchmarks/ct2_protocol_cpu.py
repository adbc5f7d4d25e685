"""CTranslate2 against fairseq-generate on CTranslate2's published CPU protocol, on real sentences.

    python benchmarks/ct2_protocol_cpu.py --data DATA_BIN --trained CK.pt [--work DIR]
        [--sentences 512] [--rounds 3] [--threads 2] [--batch 32] [--beam 4] [--json FILE]

The protocol (CTranslate2's tools/benchmark: batch 32, beam 4, length penalty 0, loading
excluded, several runs), on the test set of ``--data`` (the bible preset's data here):

* **sentences**: the first ``--sentences`` test sentences in file order (whole chapters: their
  natural length mix), as fairseq binarised them (BPE tokens);
* **forced lengths**: the sentences sorted by reference length (target BPE tokens), then cut into
  batches of ``--batch``; each batch decodes exactly L + 1 steps, L the longest reference of the
  batch (fairseq-generate: ``--min-len L --max-len-a 0 --max-len-b L``, L tokens then the forced
  ``</s>``; CTranslate2: ``min_decoding_length = max_decoding_length = L + 1``), so an untrained
  model does the work a trained model does on these sentences (a trained model's batch also runs
  until its longest output ends). Both engines get the same batches; every output length is
  checked;
* **model**: Transformer-base dimensions (512, 6 + 6 layers, 8 heads, FFN 2048), untrained
  (initialised as fairseq-train initialises it, seed 1), decoder input/output embeddings shared;
  the data's dictionaries (about 4,000 symbols each) padded with unused symbols to 32,000, the
  size of the WMT models of CTranslate2's own protocol (the output projection and the softmax
  then cost what they cost there); exported with ``fairseq-attn-export --to ct2``;
* **engines**, each a worker process that loads once, warms up on three batches (shortest,
  middle, longest; not timed) and then times whole passes when told: fairseq-generate's decoding
  loop (``task.inference_step`` with the generator fairseq-generate builds, the span its own
  timer covers), CTranslate2 float32 / int8 / int8 with a vocabulary map, and float32 / int8
  again with ``CT2_USE_MKL=0`` (oneDNN) when the default backend is MKL, or ``CT2_USE_MKL=1``
  when it is not; ``--threads`` threads each (``OMP_NUM_THREADS``; CTranslate2 ``intra_threads``);
* **rounds**: every engine times one pass per round, ``--rounds`` rounds, each round starting one
  engine later; a ratio is taken within a round, reported as the median over rounds (min..max);
* **backend**: the CPU model and flags from /proc/cpuinfo, and CTranslate2's own account of its
  ISA and GEMM backends (``CT2_VERBOSE=1``) for each backend setting;
* **vocabulary map**: from the data's training pairs, for each source token the 20 target tokens
  of highest Dice coefficient (sentence co-occurrence), and the 200 most frequent target tokens
  for every batch (CTranslate2's ``vmap.txt``).

int8 quality: ``--trained`` (the bible preset's trained model; the recipe evaluates
``averaged_last5.pt``) exported; the whole test set translated by fairseq-generate and by
CTranslate2 float32 and int8 with the recipe's decoding (beam 4, length penalty 1.0, at most
2 x source length + 10 tokens); BPE removed and detokenised as the recipe does; sacreBLEU and
chrF++ against the raw reference.
"""

import os

# torch and CTranslate2 each bring an OpenMP runtime: idle threads that spin would take the
# cores of the engine timed next (see benchmarks/RESULTS.md); let them sleep
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import collections  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from ct2_base_cpu import sh, spread, untrained_checkpoint  # noqa: E402  (the sibling benchmark)
from fairseq_attn_records.output_files import staged, write_json, write_lines, write_text  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN = os.path.join(ROOT, "fairseq_attn_plugins")
VOCAB = 32000
VMAP_PER_SOURCE, VMAP_ALWAYS = 20, 200


def cpu_info():
    model, flags = "?", set()
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    wanted = ["avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_int8"]
    return {"model": model, "cpus": os.cpu_count(), "flags": {f: f in flags for f in wanted}}


def ct2_backend(model_dir, compute_type, mkl):
    """CTranslate2's own account of its CPU backend (CT2_VERBOSE=1), in a fresh process."""
    env = dict(os.environ, CT2_VERBOSE="1")
    env.pop("CT2_USE_MKL", None)
    if mkl is not None:
        env["CT2_USE_MKL"] = mkl
    code = ("import ctranslate2, sys; t = ctranslate2.Translator(sys.argv[1], compute_type=sys.argv[2]); "
            "t.translate_batch([['a']], max_decoding_length=2)")
    p = subprocess.run([sys.executable, "-c", code, model_dir, compute_type], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return [line.split("] ", 3)[-1] for line in p.stdout.splitlines() if "[ctranslate2]" in line]


# ---------------------------------------------------------------- data and models for speed

def padded_data(data, work, src, tgt):
    """The test split of ``data`` with both dictionaries padded to VOCAB symbols by unused
    fillers appended after the data's own (their indices unchanged: the binarised files stay valid)."""
    out = os.path.join(work, "bin_speed")
    if os.path.isfile(os.path.join(out, f"dict.{tgt}.txt")):
        return out
    with staged(out) as tmp:
        os.makedirs(tmp)
        for lang in (src, tgt):
            lines = open(os.path.join(data, f"dict.{lang}.txt"), encoding="utf-8").read().splitlines()
            lines += [f"<fill{i:05d}> 1" for i in range(VOCAB - 4 - len(lines))]
            write_lines(os.path.join(tmp, f"dict.{lang}.txt"), lines)
            for ext in ("bin", "idx"):
                name = f"test.{src}-{tgt}.{lang}.{ext}"
                shutil.copyfile(os.path.join(data, name), os.path.join(tmp, name))
    return out


SIZES = {"base": [],  # transformer_wmt_en_de's own dimensions
         "tiny": ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "64", "--decoder-embed-dim",
                  "64", "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128"]}  # a smoke run only


def base_checkpoint(work, data, size):
    """An untrained Transformer (seed 1) of ``size`` in fairseq's checkpoint format, built as fairseq-train builds it."""
    return untrained_checkpoint(os.path.join(work, f"{size}_stock"), data, "transformer_wmt_en_de",
                                ["--share-decoder-input-output-embed", *SIZES[size]])


def export(data, ck, out):
    if not os.path.isdir(out):
        sh(["fairseq-attn-export", data, "--path", ck, "--to", "ct2", "--output-dir", out])
    return out


def split_tokens(data, split, src, tgt):
    """(source tokens, target tokens) per sentence id of a binarised split, as strings, no </s>."""
    from fairseq.data import Dictionary, data_utils

    out = []
    for lang in (src, tgt):
        d = Dictionary.load(os.path.join(data, f"dict.{lang}.txt"))
        ds = data_utils.load_indexed_dataset(os.path.join(data, f"{split}.{src}-{tgt}.{lang}"), d)
        out.append([[d[int(t)] for t in ds[i][:-1]] for i in range(len(ds))])
    return out


def write_vmap(data, src, tgt, path):
    """CTranslate2's vocabulary map from the training pairs: per source token the targets of
    highest Dice coefficient, and the most frequent targets always."""
    s_tok, t_tok = split_tokens(data, "train", src, tgt)
    cs, ct, cst = collections.Counter(), collections.Counter(), collections.Counter()
    for s, t in zip(s_tok, t_tok):
        s, t = set(s), set(t)
        cs.update(s)
        ct.update(t)
        cst.update((a, b) for a in s for b in t)
    best = collections.defaultdict(list)
    for (a, b), c in cst.items():
        best[a].append((2 * c / (cs[a] + ct[b]), b))
    lines = ["\t" + " ".join(w for w, _ in ct.most_common(VMAP_ALWAYS))]
    for a in sorted(best):
        lines.append(a + "\t" + " ".join(b for _, b in sorted(best[a], reverse=True)[:VMAP_PER_SOURCE]))
    write_lines(path, lines)


def forced_batches(src_tok, tgt_tok, n, batch):
    """The first n sentences sorted by reference length, cut into batches; each batch's length
    is its longest reference."""
    ids = sorted(range(min(n, len(src_tok))), key=lambda i: (len(tgt_tok[i]), len(src_tok[i]), i))
    out = []
    for b in range(0, len(ids), batch):
        chunk = ids[b:b + batch]
        out.append({"ids": chunk, "length": max(len(tgt_tok[i]) for i in chunk)})
    return out


# ---------------------------------------------------------------- workers

class FairseqWorker:
    """fairseq-generate's decoding loop: the task's dataset, the generator fairseq-generate
    builds from its flags (beam, length penalty 0), forced to each batch's length."""

    def __init__(self, spec):
        from fairseq import options
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        from fairseq_attn_plugins.loading import load_model_ensemble_and_task

        args = options.parse_args_and_arch(options.get_generation_parser(), [
            spec["data"], "--user-dir", PLUGIN, "--path", spec["model"], "--gen-subset", "test",
            "--beam", str(spec["beam"]), "--lenpen", "0", "--batch-size", str(spec["batch"]), "--cpu"])
        cfg = convert_namespace_to_omegaconf(args)
        models, _, task = load_model_ensemble_and_task([spec["model"]], {"data": spec["data"]})
        self.models = [m.eval() for m in models]
        self.task = task
        task.load_dataset("test", task_cfg=cfg.task)
        ds = task.dataset("test")
        self.batches = [(b["length"], ds.collater([ds[i] for i in b["ids"]])) for b in spec["batches"]]
        self.generator = task.build_generator(self.models, cfg.generation)
        self.generator.max_len_a = 0

    def run(self, batches):
        import torch

        n, tokens, bad, t = 0, 0, 0, time.perf_counter()
        with torch.no_grad():
            for length, sample in batches:
                self.generator.min_len = self.generator.max_len_b = length
                hyps = self.task.inference_step(self.generator, self.models, sample)
                n += len(hyps)
                tokens += len(hyps) * (length + 1)
                bad += sum(len(h[0]["tokens"]) != length + 1 for h in hyps)  # L tokens and </s>
        return n, tokens, bad, time.perf_counter() - t


class CT2Worker:
    def __init__(self, spec):
        import ctranslate2

        self.translator = ctranslate2.Translator(spec["model"], device="cpu", compute_type=spec["compute_type"],
                                                 inter_threads=1, intra_threads=spec["threads"])
        self.beam, self.vmap = spec["beam"], spec["vmap"]
        self.batches = [(b["length"], [spec["source"][i] for i in b["ids"]]) for b in spec["batches"]]

    def run(self, batches):
        n, tokens, bad, t = 0, 0, 0, time.perf_counter()
        for length, src in batches:
            res = self.translator.translate_batch(src, beam_size=self.beam, length_penalty=0,
                                                  min_decoding_length=length + 1, max_decoding_length=length + 1,
                                                  max_batch_size=len(src), use_vmap=self.vmap)
            n += len(src)
            tokens += len(src) * (length + 1)
            bad += sum(len(r.hypotheses[0]) != length + 1 for r in res)
        return n, tokens, bad, time.perf_counter() - t


def worker_main(spec_path):
    """Load, warm up, say ready; then one timed pass per "run" line on stdin, a JSON line each."""
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    if spec["engine"] == "fairseq":
        import torch

        torch.set_num_threads(spec["threads"])
        w = FairseqWorker(spec)
    else:
        w = CT2Worker(spec)
    k = len(w.batches)
    w.run([w.batches[0], w.batches[k // 2], w.batches[-1]])  # warm-up, not timed
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        n, tokens, bad, dt = w.run(w.batches)
        print(json.dumps({"sentences": n, "tokens": tokens, "wrong_lengths": bad, "seconds": dt}), flush=True)


class Worker:
    def __init__(self, name, spec, work, threads, mkl=None):
        path = os.path.join(work, f"worker_{name}.json")
        write_json(path, spec)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        env.pop("CT2_USE_MKL", None)
        if mkl is not None:
            env["CT2_USE_MKL"] = mkl
        self.name = name
        self.log = open(os.path.join(work, f"worker_{name}.log"), "w", encoding="utf-8")
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", path], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self._read()  # ready

    def _read(self):
        line = self.p.stdout.readline()
        if not line:
            self.p.wait()
            sys.exit(f"worker {self.name} stopped (rc {self.p.returncode}); see {self.log.name}")
        return json.loads(line)

    def run(self):
        self.p.stdin.write("run\n")
        self.p.stdin.flush()
        return self._read()

    def close(self):
        self.p.stdin.close()
        self.p.wait()
        self.log.close()


def same_backend(engine):
    """The backend suffix of an engine's name ("" for the default backend)."""
    return next((f"_{t}" for t in ("onednn", "mkl") if engine.endswith(f"_{t}")), "")


def speed_part(a, results):
    import ctranslate2  # noqa: F401  (fails here, before any work, when it is not installed)

    data = padded_data(a.data, a.work, a.src, a.tgt)
    ck = base_checkpoint(a.work, data, a.size)
    ct2_dir = export(data, ck, os.path.join(a.work, f"{a.size}_stock.ct2"))
    if not os.path.isfile(os.path.join(ct2_dir, "vmap.txt")):
        write_vmap(a.data, a.src, a.tgt, os.path.join(ct2_dir, "vmap.txt"))
    src_tok, tgt_tok = split_tokens(data, "test", a.src, a.tgt)
    batches = forced_batches(src_tok, tgt_tok, a.sentences, a.batch)
    backend = {"default": ct2_backend(ct2_dir, "int8", None)}
    default_mkl = any("Use Intel MKL: true" in line for line in backend["default"])
    other = "0" if default_mkl else "1"
    backend[f"CT2_USE_MKL={other}"] = ct2_backend(ct2_dir, "int8", other)
    results["ct2_backend"] = backend
    base = {"batches": batches, "beam": a.beam, "batch": a.batch, "threads": a.threads}
    engines = [("fairseq", dict(base, engine="fairseq", data=data, model=ck), None)]
    other_tag = "onednn" if default_mkl else "mkl"
    for name, ct, vmap, mkl in [("ct2_float32", "float32", False, None), ("ct2_int8", "int8", False, None),
                                ("ct2_int8_vmap", "int8", True, None),
                                (f"ct2_float32_{other_tag}", "float32", False, other),
                                (f"ct2_int8_{other_tag}", "int8", False, other)]:
        spec = dict(base, engine="ct2", model=ct2_dir, compute_type=ct, vmap=vmap,
                    source=[src_tok[i] for i in range(len(src_tok))])
        engines.append((name, spec, mkl))
    t0 = time.time()
    workers = [Worker(name, spec, a.work, a.threads, mkl) for name, spec, mkl in engines]
    print(f"{len(workers)} engines loaded and warmed up ({time.time() - t0:.0f} s)", flush=True)
    runs = {w.name: [] for w in workers}
    for r in range(a.rounds):
        for w in workers[r % len(workers):] + workers[:r % len(workers)]:
            out = w.run()
            if out["wrong_lengths"]:
                sys.exit(f"{w.name}: {out['wrong_lengths']} outputs not of their forced length")
            runs[w.name].append(out)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]['sentences'] / v[-1]['seconds']:.2f}"
                                             for k, v in runs.items()), flush=True)
    for w in workers:
        w.close()
    sps = {k: [o["sentences"] / o["seconds"] for o in v] for k, v in runs.items()}
    lengths = [b["length"] for b in batches]
    n = sum(len(b["ids"]) for b in batches)
    results["speed"] = {
        "model_size": a.size, "sentences": n, "batches": len(batches), "batch": a.batch, "beam": a.beam, "length_penalty": 0,
        "threads": a.threads, "vocabulary": VOCAB, "default_backend_mkl": default_mkl,
        "forced_length_per_batch": {"min": min(lengths), "median": statistics.median(lengths), "max": max(lengths)},
        "mean_source_tokens": statistics.mean(len(src_tok[i]) for b in batches for i in b["ids"]),
        "target_tokens_per_pass": runs["fairseq"][0]["tokens"],
        "sentences_per_s": {k: spread(v) for k, v in sps.items()},
        "target_tokens_per_s": {k: spread([o["tokens"] / o["seconds"] for o in v]) for k, v in runs.items()},
        "ratio_to_fairseq": {k: spread([x / f for x, f in zip(v, sps["fairseq"])]) for k, v in sps.items() if k != "fairseq"},
        # int8 against float32 on the same backend
        "ratio_to_ct2_float32": {k: spread([x / f for x, f in zip(v, sps[f"ct2_float32{same_backend(k)}"])])
                                 for k, v in sps.items() if k.startswith("ct2_int8")},
        f"ratio_{other_tag}_to_default": {
            ct: spread([x / f for x, f in zip(sps[f"ct2_{ct}_{other_tag}"], sps[f"ct2_{ct}"])]) for ct in ("float32", "int8")},
    }


# ---------------------------------------------------------------- int8 quality on a trained model

def detok(lines, work, name, tgt):
    tok, out = os.path.join(work, f"{name}.tok.txt"), os.path.join(work, f"{name}.txt")
    write_lines(tok, [line.replace("@@ ", "").removesuffix("@@") for line in lines])
    sh([sys.executable, "-m", "fairseq_attn_recipes", "detok", "--lang", tgt, tok, out])
    return [line.rstrip("\n") for line in open(out, encoding="utf-8")]


def quality_part(a, results):
    import ctranslate2
    import sacrebleu

    out_dir = os.path.join(a.work, "trained.ct2")
    export(a.data, a.trained, out_dir)
    src_tok, _ = split_tokens(a.data, "test", a.src, a.tgt)
    n = len(src_tok)
    ref = [line.rstrip("\n") for line in open(os.path.join(a.data, "raw", f"test.{a.tgt}"), encoding="utf-8")]
    assert len(ref) == n, (len(ref), n)
    text = sh([sys.executable, "-m", "fairseq_cli.generate", a.data, "--user-dir", PLUGIN, "--path", a.trained,
               "--gen-subset", "test", "--beam", "4", "--lenpen", "1.0", "--max-len-a", "2", "--max-len-b", "10",
               "--batch-size", str(a.batch), "--cpu"],
              env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)), log=os.path.join(a.work, "gen_trained.log"))
    hyp = {}
    for line in text.splitlines():
        if line.startswith("H-"):
            head, _score, h = line.split("\t", 2)
            hyp[int(head[2:])] = h
    outputs = {"fairseq": [hyp[i] for i in range(n)]}
    order = sorted(range(n), key=lambda i: len(src_tok[i]))
    for ct in ("float32", "int8"):
        tr = ctranslate2.Translator(out_dir, device="cpu", compute_type=ct, intra_threads=a.threads)
        got = {}
        for b in range(0, n, a.batch):
            ids = order[b:b + a.batch]
            src = [src_tok[i] for i in ids]
            # fairseq's limit: 2 x source length (with </s>) + 10 tokens, here per batch
            limit = 2 * (max(len(s) for s in src) + 1) + 10
            for i, r in zip(ids, tr.translate_batch(src, beam_size=4, length_penalty=1.0, max_decoding_length=limit)):
                got[i] = " ".join(r.hypotheses[0])
        outputs[f"ct2_{ct}"] = [got[i] for i in range(n)]
    scores, bleu, chrf = {}, sacrebleu.BLEU(), sacrebleu.CHRF(word_order=2)
    for name, lines in outputs.items():
        text = detok(lines, a.work, f"hyp_{name}", a.tgt)
        scores[name] = {"bleu": bleu.corpus_score(text, [ref]).score, "chrf++": chrf.corpus_score(text, [ref]).score,
                        "sentences_differing_from_fairseq": sum(x != y for x, y in zip(lines, outputs["fairseq"]))}
    results["int8_quality"] = {
        "checkpoint": os.path.abspath(a.trained), "test_sentences": n, "beam": 4, "length_penalty": 1.0,
        "scores": scores, "bleu_int8_minus_float32": scores["ct2_int8"]["bleu"] - scores["ct2_float32"]["bleu"],
        "signatures": {"bleu": str(bleu.get_signature()), "chrf++": str(chrf.get_signature())},
    }


LABELS = {"fairseq": "fairseq-generate (stock Transformer)", "ct2_float32": "CTranslate2 float32",
          "ct2_int8": "CTranslate2 int8", "ct2_int8_vmap": "CTranslate2 int8 + vocabulary map",
          "ct2_float32_onednn": "CTranslate2 float32, CT2_USE_MKL=0 (oneDNN)",
          "ct2_int8_onednn": "CTranslate2 int8, CT2_USE_MKL=0 (oneDNN)",
          "ct2_float32_mkl": "CTranslate2 float32, CT2_USE_MKL=1", "ct2_int8_mkl": "CTranslate2 int8, CT2_USE_MKL=1"}


def cell(s, fmt="{:.2f}"):
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}..{fmt.format(s['max'])})"


def markdown(results):
    """The tables of RESULTS.md, from the results (nothing copied by hand)."""
    out = []
    c = results["cpu"]
    out.append(f"CPU: {c['model']}, {c['cpus']} CPUs; flags: "
               + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in c["flags"].items()) + ".")
    for setting, lines in results.get("ct2_backend", {}).items():
        out.append(f"CTranslate2 {results['ctranslate2']}, {setting} (`CT2_VERBOSE=1`): "
                   + "; ".join(line.replace("[info] ", "").strip(" -") for line in lines
                               if "Loaded model" not in line and "version" not in line and "revision" not in line) + ".")
    sp = results.get("speed")
    if sp:
        fl = sp["forced_length_per_batch"]
        out.append("")
        out.append(f"{sp['sentences']} sentences in {sp['batches']} batches of {sp['batch']}, beam {sp['beam']}, length "
                   f"penalty 0, {sp['threads']} threads each; decoder steps per batch {fl['min']}..{fl['max']} "
                   f"(median {fl['median']}) + 1; {sp['target_tokens_per_pass']} target tokens per pass; "
                   f"median over {len(sp['sentences_per_s']['fairseq']['rounds'])} interleaved rounds (min..max).")
        out.append("")
        out.append("| engine | sentences/s | target tokens/s | ratio to fairseq-generate | ratio to CT2 float32 (same backend) |")
        out.append("|---|---|---|---|---|")
        for k, v in sp["sentences_per_s"].items():
            to_fs = cell(sp["ratio_to_fairseq"][k]) if k in sp["ratio_to_fairseq"] else "1"
            to_f32 = cell(sp["ratio_to_ct2_float32"][k]) if k in sp["ratio_to_ct2_float32"] else (
                "1" if k.startswith("ct2_float32") else "-")
            out.append(f"| {LABELS.get(k, k)} | {cell(v)} | {cell(sp['target_tokens_per_s'][k], '{:.0f}')} | {to_fs} | {to_f32} |")
        for key in (k for k in sp if k.startswith("ratio_") and k.endswith("_to_default")):
            out.append("")
            out.append(f"{key}: " + ", ".join(f"{ct} {cell(v)}" for ct, v in sp[key].items()))
    q = results.get("int8_quality")
    if q:
        out.append("")
        out.append(f"int8 quality: `{q['checkpoint']}`, {q['test_sentences']} test sentences, beam {q['beam']}, "
                   f"length penalty {q['length_penalty']}; BLEU `{q['signatures']['bleu']}`, chrF++ `{q['signatures']['chrf++']}`.")
        out.append("")
        out.append("| | BLEU | chrF++ | sentences differing from fairseq-generate |")
        out.append("|---|---:|---:|---:|")
        for k, v in q["scores"].items():
            out.append(f"| {'fairseq-generate' if k == 'fairseq' else LABELS.get(k, k)} | {v['bleu']:.2f} | {v['chrf++']:.2f} | {v['sentences_differing_from_fairseq']} |")
        out.append("")
        out.append(f"int8 - float32: {q['bleu_int8_minus_float32']:+.2f} BLEU.")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="binarised data with raw/test.TGT (the bible preset's)")
    ap.add_argument("--trained", required=True, help="a trained checkpoint of that data (int8 quality)")
    ap.add_argument("--src", default="grc")
    ap.add_argument("--tgt", default="en")
    ap.add_argument("--work", default="ct2_protocol_bench")
    ap.add_argument("--sentences", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--size", choices=sorted(SIZES), default="base",
                    help="the untrained model of the speed part: base (the protocol), tiny (a smoke run)")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None, help="write the tables as markdown here")
    a = ap.parse_args()
    import ctranslate2
    import torch

    os.makedirs(a.work, exist_ok=True)
    t0 = time.time()
    results = {"ctranslate2": ctranslate2.__version__, "torch": torch.__version__, "command": " ".join(sys.argv),
               "cpu": cpu_info(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
               "load_average_at_start": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(json.dumps(results["cpu"]), flush=True)
    if not a.skip_speed:
        speed_part(a, results)
    quality_part(a, results)
    results["load_average_at_end"] = os.getloadavg()
    results["wall_s"] = round(time.time() - t0)
    print(json.dumps(results, indent=1))
    if a.json:
        write_json(a.json, results, indent=1)
    if a.md:
        write_text(a.md, markdown(results))


if __name__ == "__main__":
    main()
