"""fairseq-train with the run record: ``python -m fairseq_attn_recipes.train ARGS`` takes
fairseq-train's arguments (the recipes' train.sh launches it in place of ``fairseq_cli.train``,
under torchrun and for every gloo rank alike).

Before training, fairseq's own resolution of ARGS (architecture defaults, ``--user-dir``) is
compared with the run record of ``--save-dir`` (:func:`.recording.start_run`): another run is
refused with the differences named (exit 1), a run trained to ``--max-update`` before is not
trained again (exit 10: fairseq 0.12 would make one more update and rewrite its last
checkpoint), the same run with a larger ``--max-update`` continues and the training is
recorded. The model's flags are checked first (a refused flag writes no record); a record of a
start that saved no checkpoint and finished no training is replaced, saying so. Every refusal,
the record's and the plugin's, is one line ``error: ...`` and exit status 1 (a mistyped flag:
fairseq-train's usage error, exit 2). After training, the checkpoints saved are recorded with the update number each
holds. Every rank checks; only rank 0 writes the record. Done in the training process itself,
on the configuration fairseq-train then trains with, so the record costs no second start of
torch and fairseq and cannot describe another configuration than the one trained.
"""

import logging
import os
import sys

from fairseq_attn_records.run_record import RecordError

from . import flag_origins, patience, recording
from .process_exit import exit_now

SKIPPED = 10


def is_rank0(cfg) -> bool:
    for var in ("RANK", "SLURM_PROCID"):
        if os.environ.get(var, "0") != "0":
            return False
    return (cfg.distributed_training.distributed_rank or 0) == 0


def release_data_workers() -> None:
    """Stop the DataLoader worker processes of fairseq's finished epoch iterators now. They are
    stopped when the iterators are garbage-collected, and torch then waits up to
    ``MP_STATUS_CHECK_INTERVAL`` (5 s) for each worker before terminating it; these workers do
    not exit on their own, so every training ended with about 10 s of waiting (train and valid
    iterators). Training is over: the same stop with a 0.1 s wait."""
    import gc

    from torch.utils.data import _utils
    interval = _utils.MP_STATUS_CHECK_INTERVAL
    _utils.MP_STATUS_CHECK_INTERVAL = 0.1
    try:
        gc.collect()
    finally:
        _utils.MP_STATUS_CHECK_INTERVAL = interval


def import_plugin() -> None:
    """fairseq (without what training never calls) and the plugin, imported quietly before the
    arguments are parsed: the plugin's one-line argparse errors are installed once, here, so that
    :func:`.flag_origins.argument_errors_raised` holds over them while fairseq parses."""
    logging.disable(logging.WARNING)
    try:
        from fairseq_attn_records.fairseq_import import import_fairseq
        import_fairseq()
        from fairseq_attn_plugins import registration
        registration.register()  # an import in a process named as a command that registers later does not
    finally:
        logging.disable(logging.NOTSET)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # fairseq-train's own log format, set before anything logs (the first message would
    # otherwise install logging's default format, and train.log would not parse)
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                        datefmt="%Y-%m-%d %H:%M:%S", level=os.environ.get("LOGLEVEL", "INFO").upper(),
                        stream=sys.stdout)
    import_plugin()
    try:  # an argument error of a flag a recipe variable gave (EXTRA_ARGS, MODEL_ARGS) names the variable
        with flag_origins.argument_errors_raised():
            cfg = recording.resolve_train_args(argv)
    except flag_origins.ArgumentError as e:
        return flag_origins.report(e, argv)
    rank0 = is_rank0(cfg)
    try:
        if not recording.start_run(cfg, write=rank0, argv=argv):
            until = " (or until --patience stopped it)" if cfg.checkpoint.patience > 0 else ""
            print(f"{cfg.checkpoint.save_dir}: trained before to --max-update {cfg.optimization.max_update}{until} "
                  f"with the same settings: not trained again", file=sys.stderr)
            return SKIPPED
    except RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    threads = recording.cpu_threads(cfg)  # what the run record says of this start
    if rank0 and threads is not None:
        print(f"CPU: torch computes with {threads} threads per process "
              f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; the recipes' CPU_THREADS)", file=sys.stderr)
    last = os.path.join(cfg.checkpoint.save_dir, "checkpoint_last.pt")
    if rank0 and os.path.isfile(last):  # said only once the record accepted the run (a refusal resumes nothing)
        print(f"resuming from {last}", file=sys.stderr)
    from fairseq.distributed import utils as distributed_utils
    from fairseq_cli import train as fairseq_train

    from fairseq_attn_plugins.integration.refusals import refusal_kinds

    early_stop = patience.EarlyStopSeen()
    if cfg.checkpoint.patience > 0:
        logging.getLogger("fairseq_cli.train").addHandler(early_stop)
        log = os.path.join(cfg.checkpoint.save_dir, "train.log")
        resumed = recording.resume_update(cfg.checkpoint.save_dir)
        state = patience.restore(log, resumed) if resumed and os.path.isfile(log) else None
        if rank0 and state is not None:
            print(f"--patience {cfg.checkpoint.patience}: best validation loss {state[0]} so far, "
                  f"{state[1]} validations without improvement since (from {log})", file=sys.stderr)

    # --attn-backend tuned: the layers read the run's choices and add theirs (the record keeps
    # them); set for this training only (its processes inherit it)
    from fairseq_attn_core.backends import tuning
    kept = os.environ.get(tuning.RUN_ENV)
    os.environ[tuning.RUN_ENV] = os.path.abspath(recording.tuned_paths_file(cfg.checkpoint.save_dir))
    try:
        if cfg.common.profile or cfg.common.use_plasma_view:  # fairseq-train's own setup for these
            sys.argv = [sys.argv[0]] + list(argv)
            fairseq_train.cli_main()
        else:  # what fairseq-train's cli_main does, with the config resolved once
            distributed_utils.call_main(cfg, fairseq_train.main)
    except refusal_kinds() as e:  # refused by the plugin (a checkpoint, a validation set): one line
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        logging.getLogger("fairseq_cli.train").removeHandler(early_stop)
        if kept is None:
            os.environ.pop(tuning.RUN_ENV, None)
        else:
            os.environ[tuning.RUN_ENV] = kept
    release_data_workers()
    if rank0:
        try:
            recording.finish_run(cfg.checkpoint.save_dir, stopped="patience" if early_stop.seen else None)
        except RecordError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    exit_now(main())  # without the interpreter's teardown (process_exit.py)
