"""``fairseq-attn-demo``: the whole pipeline, offline, on CPU, in minutes.

The recipes' steps on the toy corpus (local reordering and agreement), each a stage of the recipes'
resume rule (skipped when OUT/.done/STAGE records the same settings and inputs, redone when they
changed, recorded once complete): corpus (toy-corpus), bpe (joint subword-nmt), binarise
(fairseq-preprocess), train.ARCH (fairseq_attn_recipes.train, run record runs/ARCH/run.json; a killed
training resumes from checkpoint_last.pt), generate.ARCH (beam search, hyps, score: runs/ARCH/scores.json);
then BLEU and chrF++ with paired bootstrap + approximate randomisation against the first architecture,
results.md/.json, learning_curve.png (COMET too with COMET_MODEL). Sizes: profiles.py (demo, demo-quick).
"""

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import sys
import time
from typing import Dict, List

from fairseq_attn_reports import table1
from fairseq_attn_reports.curves import plot_curves
from fairseq_attn_records.command_line import Parser
from fairseq_attn_records.output_files import write_json, write_text
from fairseq_attn_reports.results import collect, format_markdown
from fairseq_attn_records import comet as comet_metric

from . import fairseq_command
from .demo_archs import DemoError, registered_archs, resolve_archs  # noqa: F401  (the demo's API)
from .fairseq_args import generate_args, preprocess_args, train_args
from .fingerprints import CHANGED, SAME, args_in, fingerprint, stage_state
from .profiles import profile
from .step_runs import StepFailed, run_module
from .train_progress import EpochProgress

FAIRSEQ = fairseq_command.__name__  # fairseq's preprocess and generate, run as python -m fairseq_cli.X runs them
DEFAULT_ARCHS = "transformer_attn_wmt_en_de,transformer_csan2d_wmt_en_de"
SRC, TGT = "src", "tgt"
PROFILES = {"full": profile("demo"), "quick": profile("demo-quick")}  # --quick: the tests' seconds
TRAINING = {  # the demo's settings beyond its profile; fairseq's defaults for the rest (no --adam-eps)
    "dropout": "0.1", "label_smoothing": "0.1", "joint": "1", "cpu": "1", "num_workers": "0",
    "no_epoch_checkpoints": "1", "keep_interval_updates": "1", "log_interval": "1000"}


def log(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Pipeline:
    def __init__(self, out_dir: str, profile: Dict, archs: List[str], threads: int, seed: int, train_args=()):
        self.out, self.p, self.archs, self.threads, self.seed, self.train_args = out_dir, profile, archs, threads, seed, list(train_args)
        self.comet = None  # a loaded COMET scorer (COMET_MODEL), loaded before any other work
        # found, not imported: the demo's own process needs neither torch nor fairseq (its steps do)
        self.user_dir = importlib.util.find_spec("fairseq_attn_plugins").submodule_search_locations[0]
        self.src = lambda: self.path("corpus", f"test.{SRC}") if self.comet else None  # COMET reads the source

    def path(self, *parts) -> str:
        return os.path.join(self.out, *parts)

    def stage(self, name: str, fn, *args, settings: Dict = None, inputs=()) -> None:
        """Run ``fn(*args)`` unless done before from these settings and inputs (the recipes' rule)."""
        marker, record = self.path(".done", name), fingerprint({k: str(v) for k, v in (settings or {}).items()}, inputs,
                                                                 self.out)
        state, changes = stage_state(marker, record)
        if state == SAME:
            return log(f"{name}: done before, reused")
        log(f"{name}: running" + (f" again, its settings or inputs changed: {changes}" if state == CHANGED else ""))
        t0 = time.time()
        fn(*args)
        write_json(marker, record)
        log(f"{name}: finished in {time.time() - t0:.1f}s")

    def _build(self, name: str, fill) -> None:
        """``fill(tmp)`` writes the folder NAME aside; it replaces NAME in one rename."""
        final, tmp = self.path(name), self.path(name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        fill(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)

    def _run(self, module: str, args: List[str], logfile: str, echo=None, ok=(0,)) -> None:
        run_module(module, args, logfile, self.threads, echo, ok)  # StepFailed: one line, exit 1

    def _step(self, args: List[str], logfile: str) -> None:  # as recipes/lib/common.sh runs a step
        self._run("fairseq_attn_recipes", args, logfile)

    def corpus(self, tmp: str) -> None:
        self._step(["toy-corpus", "--out", tmp, "--src-lang", SRC, "--tgt-lang", TGT, "--sizes", self.p["corpus_sizes"],
                    "--seed", str(self.seed)], self.path("logs", "corpus.log"))

    def bpe(self, tmp: str) -> None:
        corpus, logfile = lambda split, lang: self.path("corpus", f"{split}.{lang}"), self.path("logs", "bpe.log")
        self._step(["bpe-learn", corpus("train", SRC), corpus("train", TGT), "--output", os.path.join(tmp, "codes"),
                    "--merges", self.p["bpe_merges"]], logfile)
        files = [f for s in ("train", "valid", "test") for lang in (SRC, TGT)
                 for f in (corpus(s, lang), os.path.join(tmp, f"{s}.{lang}"))]
        self._step(["bpe-apply", "--codes", os.path.join(tmp, "codes")] + files, logfile)

    def binarise(self, tmp: str) -> None:
        pref = lambda split: self.path("bpe", split)
        args = preprocess_args(SRC, TGT, tmp, trainpref=pref("train"), validpref=pref("valid"), testpref=pref("test"),
                               joined=True)
        self._run(FAIRSEQ, ["preprocess"] + args, self.path("logs", "preprocess.log"))

    def train_settings(self, arch: str) -> List[str]:
        settings = {**TRAINING, **self.p, "seed": str(self.seed), "save_dir": self.path("runs", arch)}
        return train_args(self.path("data-bin"), self.user_dir, arch, settings) + self.train_args

    def train(self, arch: str) -> None:
        os.makedirs(self.path("runs", arch), exist_ok=True)
        echo = EpochProgress(arch, int(self.p["max_epoch"]), out=log)
        self._run("fairseq_attn_recipes.train", self.train_settings(arch), self.path("runs", arch, "train.log"), echo,
                  ok=(0, 10))  # 10: trained to the end before
        echo.flush()

    def generate(self, arch: str) -> None:
        run = self.path("runs", arch)
        gen_log, ckpt = os.path.join(run, "generate.out"), os.path.join(run, "checkpoint_best.pt")
        for old in (gen_log, gen_log + ".steps.log"):
            if os.path.exists(old):
                os.remove(old)
        args = generate_args(self.path("data-bin"), self.user_dir, ckpt, "test", beam=4, lenpen=1.0, batch_size=64, cpu=True)
        self._run(FAIRSEQ, ["generate"] + args, gen_log)
        # the toy corpus is whitespace-tokenised text, so BPE removal gives the detokenised output
        hyp, n_test = os.path.join(run, "hyp.txt"), sum(1 for _ in open(self.path("corpus", f"test.{TGT}"), "rb"))
        self._step(["hyps", gen_log, "--n", str(n_test), "--output", hyp], gen_log + ".steps.log")
        self._step(["score", "--hyp", hyp, "--ref", self.path("corpus", f"test.{TGT}"), "--subset", "test",
                    "--run-dir", run, "--output", os.path.join(run, "scores.json"), "--text", f"checkpoint={ckpt}",
                    "--number", "beam=4", "--number", "lenpen=1.0"] + (["--src", self.src()] if self.comet else []),
                   gen_log + ".steps.log")

    def score(self) -> None:
        runs = [(arch, self.path("runs", arch)) for arch in self.archs]
        table = collect(runs, self.path("corpus", f"test.{TGT}"), bs_samples=int(self.p["bs_samples"]),
                        ar_trials=int(self.p["ar_trials"]), comet=self.comet, src_path=self.src())
        write_json(self.path("results.json"), table)
        write_text(self.path("results.md"), format_markdown(table) + "\n")
        plot_curves([(name, [run]) for name, run in runs], self.path("learning_curve.png"))
        self.write_table1()

    def write_table1(self) -> None:
        """The CSAN paper's Table 1 layout, when every architecture is one of its rows (or an
        extra position row: RoPE, ALiBi, T5 bias); none left from an earlier set of architectures."""
        by_arch = {row.arch: row for row in table1.ROWS + table1.EXTRA_ROWS}
        if self.archs[0] != table1.ROWS[0].arch or not all(a in by_arch for a in self.archs):
            for name in ("table1.json", "table1.md"):
                if os.path.exists(self.path(name)):
                    os.remove(self.path(name))
            return
        t = table1.build_table([(by_arch[a], self.path("runs", a)) for a in self.archs], self.path("corpus", f"test.{TGT}"),
                               bs_samples=int(self.p["bs_samples"]), ar_trials=int(self.p["ar_trials"]),
                               comet=self.comet, src_path=self.src())
        write_json(self.path("table1.json"), t)
        write_text(self.path("table1.md"), table1.format_markdown(t) + "\n")

    def run_all(self) -> None:
        for folder in ("logs", ".done"):
            os.makedirs(self.path(folder), exist_ok=True)
        corpus_files = [self.path("corpus", f"{s}.{lang}") for s in ("train", "valid", "test") for lang in (SRC, TGT)]
        self.stage("corpus", self._build, "corpus", self.corpus, settings={"sizes": self.p["corpus_sizes"], "seed": self.seed})
        self.stage("bpe", self._build, "bpe", self.bpe, settings={"merges": self.p["bpe_merges"]}, inputs=corpus_files)
        self.stage("binarise", self._build, "data-bin", self.binarise, inputs=[self.path("bpe")])
        for arch in self.archs:
            # the demo folder's paths (data-bin, the run) named relative to it: a copied or moved folder
            # keeps its trainings, as a recipe's WORK keeps its steps
            self.stage(f"train.{arch}", self.train, arch,
                       settings={"argv": shlex.join(args_in(self.train_settings(arch), self.out))},
                       inputs=[self.path("data-bin")])
            self.stage(f"generate.{arch}", self.generate, arch, settings={"beam": 4},
                       inputs=[self.path("runs", arch, "checkpoint_best.pt"), self.path("corpus", f"test.{TGT}")])
        log("score: BLEU, significance tests, results table, learning curve")  # always recomputed (seconds)
        self.score()


def main(argv=None) -> int:
    ap = Parser(prog="fairseq-attn-demo", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--out-dir", default="demo_out", help="where everything goes (default ./demo_out)")
    ap.add_argument("--quick", action="store_true", help="tiny corpus and 2 epochs (seconds per step; for tests)")
    ap.add_argument("--archs", default=DEFAULT_ARCHS, help=f"comma-separated registered architectures, baseline first, "
                    f"'all', or 'table1' (every row of the CSAN paper's Table 1; default {DEFAULT_ARCHS})")
    ap.add_argument("--epochs", type=int, help="training epochs per architecture (default: 12, --quick 2)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train-args", default="",
                    help="extra fairseq-train flags for every architecture, e.g. \"--attention-dropout 0.1\" (a piece's flag is refused for an architecture without that piece)")
    args = ap.parse_args(argv)
    profile = dict(PROFILES["quick" if args.quick else "full"])
    if args.epochs is not None:
        profile["max_epoch"] = str(args.epochs)
    try:
        archs = resolve_archs(args.archs)
        if len(archs) < 2:
            raise DemoError("--archs: give a baseline and at least one system to compare")
        settings = {k: profile[k] for k in ("corpus_sizes", "bpe_merges", "model_args", "max_epoch")}
        settings.update(seed=args.seed, train_args=args.train_args, run_folder="runs/ARCH: checkpoints and run record")
        _check_settings(args.out_dir, settings)
        t0 = time.time()
        log(f"output in {os.path.abspath(args.out_dir)}; architectures: {', '.join(archs)}")
        pipeline = Pipeline(args.out_dir, profile, archs, args.threads, args.seed, shlex.split(args.train_args))
        if comet_metric.model_path_from_env():
            pipeline.comet = comet_metric.load(comet_metric.model_path_from_env())
        pipeline.run_all()
    except (DemoError, StepFailed, comet_metric.CometError) as e:
        print(f"fairseq-attn-demo: error: {e}", file=sys.stderr)
        return 1
    for name, title in (("results.md", "\n"), ("table1.md", "Table 1 layout (table1.md):\n\n")):
        if os.path.exists(os.path.join(args.out_dir, name)):
            print(title + open(os.path.join(args.out_dir, name), encoding="utf-8").read())
    log(f"done in {time.time() - t0:.0f}s: results.md, results.json, learning_curve.png in {args.out_dir}")
    return 0


def _check_settings(out_dir: str, settings: Dict) -> None:
    """Refuse to mix outputs of different corpus/model settings in one directory."""
    path = os.path.join(out_dir, "settings.json")
    old = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else settings
    if old != settings:
        made = " (by an earlier version of the demo, which recorded other names)" if "enc_layers" in old else ""
        raise DemoError(f"{out_dir} holds a demo with other settings ({path}{made}); use another --out-dir or delete it")
    os.makedirs(out_dir, exist_ok=True)
    write_json(path, settings)


if __name__ == "__main__":
    sys.exit(main())
