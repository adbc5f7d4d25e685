"""``fairseq-attn-demo``: the whole pipeline, offline, on CPU, in minutes.

Steps (each reused when re-run; outputs are written to temporary names and
renamed, and a step is marked done in ``OUT/.done/`` only when complete):

1. corpus     -- the embedded synthetic language pair (toy_corpus.py: local
                 reordering and agreement), train/valid/test;
2. bpe        -- joint BPE learned on the toy training data with subword-nmt;
3. binarise   -- fairseq-preprocess, joined dictionary;
4. train      -- one small Transformer per architecture (baseline + CSAN-2D by
                 default; ``--archs`` takes any registered architectures), with
                 its run record (``runs/ARCH/run.json``); an interrupted training
                 resumes from checkpoint_last.pt;
5. generate   -- beam search on the test set, BPE removed; scored and recorded
                 in the run record (``runs/ARCH/scores.json``);
6. score      -- BLEU and chrF++ (sacreBLEU), each with paired bootstrap + approximate
                 randomisation against the first architecture and its own mark,
                 results table (markdown + JSON) and a learning-curve plot (PNG);
                 COMET too when COMET_MODEL points at a local checkpoint.

Steps 2, 4 and 5 are the recipes' own steps (``python -m fairseq_attn_recipes bpe-learn``,
``bpe-apply``, ``hyps``, ``score``; ``python -m fairseq_attn_recipes.train``), so a demo run is
a run like a recipe's. The model sizes here are toy sizes; recipes/ has the papers' setups.
"""

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from typing import Dict, List

import fairseq_attn_plugins
from fairseq_attn_plugins.reporting import table1
from fairseq_attn_plugins.reporting.curves import plot_curves
from fairseq_attn_records.output_files import write_json, write_text
from fairseq_attn_plugins.reporting.results import collect, format_markdown
from fairseq_attn_plugins.toy_corpus import write_corpus
from fairseq_attn_records import comet as comet_metric

DEFAULT_ARCHS = "transformer_attn_wmt_en_de,transformer_csan2d_wmt_en_de"
SRC, TGT = "src", "tgt"

# toy-sized setups; "quick" is for tests (seconds), "full" for the README demo (minutes)
PROFILES = {
    "full": dict(sizes=(("train", 4000), ("valid", 200), ("test", 400)), bpe_merges=150,
                 enc_layers=3, dec_layers=2, dim=64, ffn=128, heads=4, max_tokens=1500,
                 max_epoch=12, warmup=60, lr=3e-3, bs_samples=1000, ar_trials=10000, save_updates=10),
    "quick": dict(sizes=(("train", 300), ("valid", 40), ("test", 40)), bpe_merges=60,
                  enc_layers=3, dec_layers=1, dim=32, ffn=64, heads=4, max_tokens=1000,
                  max_epoch=2, warmup=10, lr=3e-3, bs_samples=1000, ar_trials=1000, save_updates=1),
}


def log(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class EpochProgress:
    """The demo's progress lines of one training, from fairseq-train's json log lines as they
    come: the parameter count, resumes, and per epoch one line with its last validation loss
    and one with its training averages. fairseq validates at every mid-epoch checkpoint (many
    per epoch) and logs the epoch's ``train`` record after its last validation: a validation is
    held until the next one replaces it or the epoch's record prints it (:meth:`flush` prints
    one still held when the training ends without that record)."""

    def __init__(self, arch: str, max_epoch: int, out=None):
        self.arch, self.max_epoch = arch, max_epoch
        self.out = out or log
        self.valid = None  # the latest validation of the epoch, not printed yet

    def __call__(self, line: str) -> None:
        if "| valid |" in line or "| train |" in line:
            stats = json.loads(line[line.index("{"):])
            if "valid_loss" in stats:
                self.valid = stats
                return
            self.flush()
            self.out(f"  {self.arch} epoch {stats['epoch']}/{self.max_epoch}: train loss {stats['train_loss']}, "
                     f"{stats['train_wps']} tok/s")
        elif "num. shared model params" in line or "Loaded checkpoint" in line:
            self.out("  " + line.split("| ")[-1].strip())

    def flush(self) -> None:
        if self.valid is not None:
            stats, self.valid = self.valid, None
            self.out(f"  {self.arch} epoch {stats['epoch']}/{self.max_epoch}: valid loss {stats['valid_loss']}")


class DemoError(RuntimeError):
    pass


def registered_archs() -> List[str]:
    """Architectures of the plugin model, read from fairseq's registry."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY
    return sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == "transformer_attn")


def resolve_archs(spec: str) -> List[str]:
    known = registered_archs()
    if spec == "table1":  # every row of the CSAN paper's Table 1; a missing one is an error
        try:
            return [row.arch for row in table1.resolve_rows("all")]
        except table1.Table1Error as e:
            raise DemoError(f"--archs table1: {e}; or list the architectures with --archs A,B,...") from None
    if spec == "all":  # every base-size variant (big ones are the same models with other defaults)
        base = [a for a in known if not a.endswith("_big")]
        return ["transformer_attn_wmt_en_de"] + [a for a in base if a != "transformer_attn_wmt_en_de"]
    archs = [a.strip() for a in spec.split(",") if a.strip()]
    bad = [a for a in archs if a not in known]
    if bad:
        raise DemoError(f"--archs: unknown architecture(s) {', '.join(bad)}; registered by "
                        f"fairseq_attn_plugins: {', '.join(known)} (or 'all')")
    if len(archs) != len(set(archs)):
        raise DemoError("--archs: an architecture is listed twice")
    return archs


class Pipeline:
    def __init__(self, out_dir: str, profile: Dict, archs: List[str], threads: int, seed: int,
                 train_args: List[str] = ()):
        self.out, self.p, self.archs, self.threads, self.seed = out_dir, profile, archs, threads, seed
        self.train_args = list(train_args)
        self.comet = None  # a loaded COMET scorer (COMET_MODEL), loaded before any other work
        self.done_dir = os.path.join(out_dir, ".done")
        self.user_dir = os.path.dirname(os.path.abspath(fairseq_attn_plugins.__file__))
        os.makedirs(self.done_dir, exist_ok=True)

    # -- step bookkeeping ---------------------------------------------------
    def path(self, *parts) -> str:
        return os.path.join(self.out, *parts)

    def step(self, name: str, fn, *args) -> None:
        marker = os.path.join(self.done_dir, name)
        if os.path.exists(marker):
            log(f"{name}: done before, reused")
            return
        log(f"{name}: running")
        t0 = time.time()
        fn(*args)
        write_text(marker, f"{time.time() - t0:.1f}\n")
        log(f"{name}: finished in {time.time() - t0:.1f}s")

    def _fresh_tmp(self, final: str) -> str:
        tmp = final + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        return tmp

    def _commit_dir(self, tmp: str, final: str) -> None:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)

    def _run(self, module: str, args: List[str], logfile: str, echo=None) -> None:
        """Run ``python -m module args``, appending its output to ``logfile``."""
        env = dict(os.environ, OMP_NUM_THREADS=str(self.threads), MKL_NUM_THREADS=str(self.threads),
                   PYTHONWARNINGS="ignore")
        cmd = [sys.executable, "-m", module] + args
        with open(logfile, "a", encoding="utf-8") as lf:
            lf.write("$ " + " ".join(cmd) + "\n")
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            for line in proc.stdout:
                lf.write(line)
                lf.flush()
                if echo:
                    echo(line)
            rc = proc.wait()
        if rc != 0:
            with open(logfile, encoding="utf-8") as lf:
                errors = [line.strip() for line in lf if line.startswith("error: ")]
            raise DemoError(f"{module} failed (exit {rc}){': ' + errors[-1][7:] if errors else ''}; see {logfile}")

    def _step(self, args: List[str], logfile: str) -> None:
        """A recipe step, as recipes/lib/common.sh runs it: ``python -m fairseq_attn_recipes ARGS``."""
        self._run("fairseq_attn_recipes", args, logfile)

    # -- steps --------------------------------------------------------------
    def corpus(self) -> None:
        final = self.path("corpus")
        tmp = self._fresh_tmp(final)
        write_corpus(tmp, SRC, TGT, self.p["sizes"], self.seed)
        self._commit_dir(tmp, final)

    def bpe(self) -> None:
        final = self.path("bpe")
        tmp = self._fresh_tmp(final)
        codes = os.path.join(tmp, "codes")
        logfile = self.path("logs", "bpe.log")
        self._step(["bpe-learn", self.path("corpus", f"train.{SRC}"), self.path("corpus", f"train.{TGT}"),
                    "--output", codes, "--merges", str(self.p["bpe_merges"])], logfile)
        files = []
        for split, _ in self.p["sizes"]:
            for lang in (SRC, TGT):
                files += [self.path("corpus", f"{split}.{lang}"), os.path.join(tmp, f"{split}.{lang}")]
        self._step(["bpe-apply", "--codes", codes] + files, logfile)
        self._commit_dir(tmp, final)

    def binarise(self) -> None:
        final = self.path("data-bin")
        tmp = self._fresh_tmp(final)
        pref = lambda s: self.path("bpe", s)
        self._run("fairseq_cli.preprocess",
                  ["--source-lang", SRC, "--target-lang", TGT, "--trainpref", pref("train"),
                   "--validpref", pref("valid"), "--testpref", pref("test"), "--destdir", tmp,
                   "--joined-dictionary", "--workers", "1"], self.path("logs", "preprocess.log"))
        self._commit_dir(tmp, final)

    def train(self, arch: str) -> None:
        p = self.p
        run = self.path("runs", arch)
        os.makedirs(run, exist_ok=True)

        echo = EpochProgress(arch, p["max_epoch"])
        self._run("fairseq_attn_recipes.train", [
            self.path("data-bin"), "--user-dir", self.user_dir, "--arch", arch,
            "--encoder-layers", str(p["enc_layers"]), "--decoder-layers", str(p["dec_layers"]),
            "--encoder-embed-dim", str(p["dim"]), "--decoder-embed-dim", str(p["dim"]),
            "--encoder-ffn-embed-dim", str(p["ffn"]), "--decoder-ffn-embed-dim", str(p["ffn"]),
            "--encoder-attention-heads", str(p["heads"]), "--decoder-attention-heads", str(p["heads"]),
            "--share-all-embeddings", "--dropout", "0.1",
            "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "0.0",
            "--lr", str(p["lr"]), "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(p["warmup"]),
            "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            "--max-tokens", str(p["max_tokens"]), "--max-epoch", str(p["max_epoch"]),
            "--cpu", "--num-workers", "0", "--seed", str(self.seed),
            "--save-dir", run, "--no-epoch-checkpoints",
            # mid-epoch checkpoints: a killed training resumes at the update where it was saved,
            # with fairseq's iterator position, so the resumed run equals the uninterrupted one
            "--save-interval-updates", str(p["save_updates"]), "--keep-interval-updates", "1",
            "--log-format", "json", "--log-interval", "1000",
        ] + self.train_args, os.path.join(run, "train.log"), echo)
        echo.flush()

    def generate(self, arch: str) -> None:
        run = self.path("runs", arch)
        gen_log = os.path.join(run, "generate.out")
        ckpt = os.path.join(run, "checkpoint_best.pt")
        for old in (gen_log, gen_log + ".steps.log"):
            if os.path.exists(old):
                os.remove(old)
        self._run("fairseq_cli.generate", [
            self.path("data-bin"), "--user-dir", self.user_dir, "--gen-subset", "test",
            "--path", ckpt,
            "--beam", "4", "--batch-size", "64", "--remove-bpe", "--cpu", "--num-workers", "0",
            # fairseq 0.12 drops a final batch smaller than this multiple: keep every sentence
            "--required-batch-size-multiple", "1",
        ], gen_log)
        # the toy corpus is whitespace-tokenised text, so BPE removal gives the detokenised output
        hyp = os.path.join(run, "hyp.txt")
        n_test = dict(self.p["sizes"])["test"]
        self._step(["hyps", gen_log, "--n", str(n_test), "--output", hyp], gen_log + ".steps.log")
        scored = ["score", "--hyp", hyp, "--ref", self.path("corpus", f"test.{TGT}"), "--subset", "test",
                  "--run-dir", run, "--output", os.path.join(run, "scores.json"),
                  "--extra", json.dumps({"checkpoint": ckpt, "beam": 4, "lenpen": 1.0})]
        if self.comet is not None:
            scored += ["--src", self.path("corpus", f"test.{SRC}")]
        self._step(scored, gen_log + ".steps.log")

    def score(self) -> None:
        runs = [(arch, self.path("runs", arch)) for arch in self.archs]
        table = collect(runs, self.path("corpus", f"test.{TGT}"),
                        bs_samples=self.p["bs_samples"], ar_trials=self.p["ar_trials"], comet=self.comet,
                        src_path=self.path("corpus", f"test.{SRC}") if self.comet else None)
        write_json(self.path("results.json"), table)
        write_text(self.path("results.md"), format_markdown(table) + "\n")
        plot_learning_curves(runs, self.path("learning_curve.png"))
        self.write_table1()

    def write_table1(self) -> None:
        """The CSAN paper's Table 1 layout, when every architecture is one of its rows (or an
        extra position row: RoPE, ALiBi, T5 bias)."""
        by_arch = {row.arch: row for row in table1.ROWS + table1.EXTRA_ROWS}
        if self.archs[0] != table1.ROWS[0].arch or not all(a in by_arch for a in self.archs):
            for name in ("table1.json", "table1.md"):  # none from an earlier set of architectures
                if os.path.exists(self.path(name)):
                    os.remove(self.path(name))
            return
        t = table1.build_table([(by_arch[a], self.path("runs", a)) for a in self.archs],
                               self.path("corpus", f"test.{TGT}"), bs_samples=self.p["bs_samples"],
                               ar_trials=self.p["ar_trials"], comet=self.comet,
                               src_path=self.path("corpus", f"test.{SRC}") if self.comet else None)
        write_json(self.path("table1.json"), t)
        write_text(self.path("table1.md"), table1.format_markdown(t) + "\n")

    def run_all(self) -> None:
        os.makedirs(self.path("logs"), exist_ok=True)
        self.step("corpus", self.corpus)
        self.step("bpe", self.bpe)
        self.step("binarise", self.binarise)
        for arch in self.archs:
            self.step(f"train.{arch}", self.train, arch)
            self.step(f"generate.{arch}", self.generate, arch)
        # the table depends on the set of architectures: always recomputed (seconds)
        log("score: BLEU, significance tests, results table, learning curve")
        self.score()


def plot_learning_curves(runs, png_path: str) -> None:
    """Training and validation loss against updates and wall-clock time (the plot of
    ``fairseq-attn-results --curves``, one run per architecture)."""
    plot_curves([(name, [run]) for name, run in runs], png_path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="fairseq-attn-demo", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--out-dir", default="demo_out", help="where everything goes (default ./demo_out)")
    ap.add_argument("--quick", action="store_true", help="tiny corpus and 2 epochs (seconds per step; for tests)")
    ap.add_argument("--archs", default=DEFAULT_ARCHS,
                    help=f"comma-separated registered architectures, baseline first, 'all', or "
                         f"'table1' (every row of the CSAN paper's Table 1; default {DEFAULT_ARCHS})")
    ap.add_argument("--epochs", type=int, help="training epochs per architecture (default: 12, --quick 2)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train-args", default="",
                    help="extra fairseq-train flags for every architecture, e.g. \"--attention-dropout 0.1\" (a piece's flag is refused for an architecture without that piece)")
    args = ap.parse_args(argv)

    profile = dict(PROFILES["quick" if args.quick else "full"])
    if args.epochs is not None:
        profile["max_epoch"] = args.epochs
    try:
        archs = resolve_archs(args.archs)
        if len(archs) < 2:
            raise DemoError("--archs: give a baseline and at least one system to compare")
        settings = {k: profile[k] for k in ("sizes", "bpe_merges", "enc_layers", "dec_layers", "dim", "ffn")}
        settings.update(seed=args.seed, max_epoch=profile["max_epoch"], train_args=args.train_args,
                        run_folder="runs/ARCH: checkpoints and run record")
        _check_settings(args.out_dir, settings)
        t0 = time.time()
        log(f"output in {os.path.abspath(args.out_dir)}; architectures: {', '.join(archs)}")
        pipeline = Pipeline(args.out_dir, profile, archs, args.threads, args.seed, shlex.split(args.train_args))
        if comet_metric.model_path_from_env():
            pipeline.comet = comet_metric.load(comet_metric.model_path_from_env())
        pipeline.run_all()
    except (DemoError, comet_metric.CometError) as e:
        print(f"fairseq-attn-demo: error: {e}", file=sys.stderr)
        return 2
    with open(os.path.join(args.out_dir, "results.md"), encoding="utf-8") as f:
        print("\n" + f.read())
    t1 = os.path.join(args.out_dir, "table1.md")
    if os.path.exists(t1):
        with open(t1, encoding="utf-8") as f:
            print("Table 1 layout (table1.md):\n\n" + f.read())
    log(f"done in {time.time() - t0:.0f}s: results.md, results.json, learning_curve.png in {args.out_dir}")
    return 0


def _check_settings(out_dir: str, settings: Dict) -> None:
    """Refuse to mix outputs of different corpus/model settings in one directory."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "settings.json")
    settings = json.loads(json.dumps(settings))  # tuples -> lists
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
        if old != settings:
            raise DemoError(f"{out_dir} holds a demo with other settings ({path}); "
                            f"use another --out-dir or delete it")
    else:
        write_json(path, settings)


if __name__ == "__main__":
    sys.exit(main())
