"""Run fairseq's command-line tools on a tiny generated corpus (not a test module)."""

import contextlib
import io
import os
import subprocess
import sys

import fairseq_attn_plugins

PLUGIN_DIR = os.path.dirname(os.path.abspath(fairseq_attn_plugins.__file__))

TINY = ["--encoder-layers", "3", "--decoder-layers", "2", "--encoder-embed-dim", "16",
        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"]
TRAIN = ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "800", "--cpu", "--num-workers", "0",
         "--no-progress-bar", "--log-interval", "1", "--log-format", "simple", "--seed", "1",
         "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
         "--no-epoch-checkpoints"]


def make_data(root, n_train=200, n_valid=20, n_test=12):
    """Toy corpus -> fairseq-preprocess (joined dictionary). Returns the binarised dir."""
    from fairseq_attn_records.toy_corpus import write_corpus

    raw, dest = os.path.join(root, "raw"), os.path.join(root, "bin")
    write_corpus(raw, sizes=(("train", n_train), ("valid", n_valid), ("test", n_test)))
    preprocess_in_process(["--source-lang", "src", "--target-lang", "tgt",
                           "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid",
                           "--testpref", f"{raw}/test", "--destdir", dest,
                           "--joined-dictionary", "--workers", "1"])
    return dest


def shared_data(n_train=200, n_valid=20, n_test=12):
    """:func:`make_data`'s binarised dir, made once per test run for all workers (read only)."""
    from shared_builds import build_once
    sizes = (n_train, n_valid, n_test)
    return os.path.join(build_once("toy_bin_%d_%d_%d" % sizes, lambda root: make_data(root, *sizes)), "bin")


def run_cli(module, argv, check=True):
    """``python -m module argv`` in a subprocess; returns (returncode, combined output)."""
    proc = subprocess.run([sys.executable, "-m", module, *argv], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{module} failed ({proc.returncode}):\n{proc.stdout[-4000:]}")
    return proc.returncode, proc.stdout


def preprocess_in_process(argv):
    """fairseq-preprocess's main in this process (saves the interpreter start-up per corpus).
    The log file that main opens in the folder it writes (a handler on its logger) is closed
    when it returns."""
    import logging

    from fairseq import options
    from fairseq_cli import preprocess

    log = logging.getLogger("fairseq_cli.preprocess")
    kept = list(log.handlers)
    try:
        preprocess.main(options.get_preprocessing_parser().parse_args(argv))
    finally:
        for handler in [h for h in log.handlers if h not in kept]:
            log.removeHandler(handler)
            handler.close()


def train_in_process(argv):
    """fairseq-train's main() in this process (saves the interpreter start-up per run)."""
    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train

    from fairseq_attn_recipes.train import release_data_workers

    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), train.main)
    if args.num_workers > 0:  # their DataLoader workers, not left for a later test; the full garbage
        release_data_workers()  # collection that stops them walks the test process's heap (~0.3 s)


def generate_config(argv):
    """fairseq-generate's parsed and composed config for ``argv``, as its console entry makes it.
    A test generating from many checkpoints with otherwise equal flags composes it once (the
    hydra composition is a third of a tiny run's time) and hands each run a copy naming its
    checkpoint: :func:`generate_with_config`."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    if "--num-workers" not in argv:  # a DataLoader worker left behind costs ~5 s at shutdown
        argv = [*argv, "--num-workers", "0"]
    return convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_generation_parser(), argv))


def generate_with_config(cfg, path=None):
    """fairseq-generate's main on (a copy of) ``cfg``, with the checkpoint ``path`` if given;
    returns its stdout (hypotheses and BLEU)."""
    import copy

    from fairseq_cli import generate

    cfg = copy.deepcopy(cfg)
    if path is not None:
        cfg.common_eval.path = path
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        generate.main(cfg)
    return buf.getvalue()


def generate_in_process(argv):
    """fairseq-generate in this process; returns its stdout (hypotheses and BLEU)."""
    return generate_with_config(generate_config(argv))
