"""Run fairseq's command-line tools on a tiny generated corpus (not a test module)."""

import contextlib
import copy
import io
import os
import subprocess
import sys
from argparse import Namespace

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
    from fairseq_cli import train

    from fairseq_attn_recipes.train import release_data_workers

    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    distributed_utils.call_main(fairseq_config(args), train.main)
    if args.num_workers > 0:  # their DataLoader workers, not left for a later test; the full garbage
        release_data_workers()  # collection that stops them walks the test process's heap (~0.3 s)


def generate_config(argv):
    """fairseq-generate's parsed and composed config for ``argv``, as its console entry makes it.
    A test generating from many checkpoints with otherwise equal flags hands each run a copy
    naming its checkpoint: :func:`generate_with_config`."""
    from fairseq import options

    if "--num-workers" not in argv:  # a DataLoader worker left behind costs ~5 s at shutdown
        argv = [*argv, "--num-workers", "0"]
    return fairseq_config(options.parse_args_and_arch(options.get_generation_parser(), argv))


#: hydra's composition of fairseq's config per choice of config groups (``task=translation``,
#: ``optimizer=adam``, ...): never handed out, each run gets a copy
_GROUPS_COMPOSED = {}
#: an override as hydra's grammar parses it (the same text, the same parse)
_PARSED = {}


def fairseq_config(args):
    """fairseq's ``convert_namespace_to_omegaconf(args)`` (the config fairseq-train and
    fairseq-generate run on), the same config, made faster in a process that makes many: hydra
    composes fairseq's config from its defaults for the config groups the arguments choose once per
    choice, and each call applies its value overrides (``common.seed=1``, ...) to a copy with hydra's
    own override parser and loader, as hydra's compose applies them after the defaults. About 0.4 s of
    a tiny run's CPU, ~210 runs per suite; tests/test_fairseq_config.py holds it equal to fairseq's.
    Overrides it does not take (an error) are composed by fairseq itself, which reports them."""
    import fairseq
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.dataclass.utils import (_set_legacy_defaults, convert_namespace_to_omegaconf,
                                         omegaconf_no_object_check, override_module_args)
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.optim import OPTIMIZER_REGISTRY
    from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY
    from fairseq.tasks import TASK_REGISTRY
    from hydra import compose, initialize_config_dir
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    overrides, deletes = override_module_args(args)
    groups = tuple(o for o in overrides if "." not in o.split("=", 1)[0])
    try:
        if groups not in _GROUPS_COMPOSED:
            GlobalHydra.instance().clear()
            with initialize_config_dir(config_dir=os.path.join(os.path.dirname(fairseq.__file__), "config")):
                _GROUPS_COMPOSED[groups] = compose("config", overrides=list(groups), strict=False)
        composed = copy.deepcopy(_GROUPS_COMPOSED[groups])
        OmegaConf.set_struct(composed, True)  # as hydra applies the overrides
        values = [o for o in overrides if o not in groups]
        unparsed = [o for o in values if o not in _PARSED]
        _PARSED.update(zip(unparsed, OverridesParser.create().parse_overrides(unparsed)))
        ConfigLoaderImpl._apply_overrides_to_config(copy.deepcopy([_PARSED[o] for o in values]), composed)
    except Exception:
        return convert_namespace_to_omegaconf(args)
    # the rest is fairseq's convert_namespace_to_omegaconf after its compose
    OmegaConf.set_struct(composed, False)
    for k in deletes:
        composed[k] = None
    cfg = OmegaConf.create(OmegaConf.to_container(composed, resolve=True, enum_to_str=True))
    legacy = (("task", "task", TASK_REGISTRY), ("model", "arch", ARCH_MODEL_REGISTRY),
              ("optimizer", "optimizer", OPTIMIZER_REGISTRY), ("lr_scheduler", "lr_scheduler", LR_SCHEDULER_REGISTRY),
              ("criterion", "criterion", CRITERION_REGISTRY))
    with omegaconf_no_object_check():
        for key, name, registry in legacy:
            if cfg[key] is None and getattr(args, name, None):
                cfg[key] = Namespace(**vars(args))
                _set_legacy_defaults(cfg[key], registry[getattr(args, name)])
                cfg[key]._name = getattr(args, name)
    OmegaConf.set_struct(cfg, True)
    return cfg


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
