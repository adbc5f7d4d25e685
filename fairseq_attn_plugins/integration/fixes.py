"""Every change the plugin makes to fairseq (and to Python's error reporting) on import, in one
table, installed by one function, each once.

:data:`FIXES` holds one row per replaced function: where it lives, what replaces it (a function
of the original, which it calls) and why; docs/explanation/architecture.md lists the same rows with their
reasons. :func:`install` (the package's ``__init__`` calls it) first allowlists fairseq's
checkpoint classes for torch's ``weights_only=True`` loads (a registration with torch, not a
replacement), then replaces each function of the table whose condition holds, unless the
function in place already carries the row's mark: a second call, or a second import of the
package under another name, replaces nothing (a test counts the marks along each function's
``__wrapped__`` chain).
"""

import dataclasses
import importlib
from typing import Callable, Tuple

from .. import checkpoint_safety
from ..models import finetune
from . import (exit_safety, fairseq_fixes, loss_scaler_state, model_overrides, optimizer_methods, quiet_imports,
               refusals, resumed_batches, trainer_checks)

MARK = "_attn_plugins_fix"  # attribute of an installed replacement: the name of its row


def _always() -> bool:
    return True


@dataclasses.dataclass(frozen=True)
class Fix:
    name: str
    target: str  # "module:attribute" (an attribute of a class: "module:Class.attribute")
    replace: Callable[[Callable], Callable]  # the original -> its replacement (calls it)
    why: str
    when: Callable[[], bool] = _always  # installed only where this holds

    def owner_and_attribute(self):
        module, _, path = self.target.partition(":")
        owner = importlib.import_module(module)
        *classes, attribute = path.split(".")
        for name in classes:
            owner = getattr(owner, name)
        return owner, attribute

    def install(self) -> None:
        if not self.when():
            return
        owner, attribute = self.owner_and_attribute()
        original = getattr(owner, attribute)
        if getattr(original, MARK, None) == self.name:
            return
        replacement = self.replace(original)
        replacement.__wrapped__ = original
        setattr(replacement, MARK, self.name)
        setattr(owner, attribute, replacement)


def _checked_loader(original):
    """checkpoint_safety's one-line errors, then model_overrides' check of ``arg_overrides``."""
    return model_overrides.checked_loader(checkpoint_safety.named_errors(original))


def _refusals_hook(original):
    def excepthook(kind, value, tb):
        refusals.excepthook(kind, value, tb, original)

    return excepthook


def _one_line_parser_error(original):
    def error(self, message):
        refusals.parser_error(self, message)

    return error


FIXES: Tuple[Fix, ...] = (
    Fix("named checkpoint errors, checked overrides", "fairseq.checkpoint_utils:load_checkpoint_to_cpu",
        _checked_loader,
        "a corrupt or unsafe checkpoint raises one line naming the file (not torch's unpickling "
        "traceback); `--model-overrides` / `arg_overrides` are checked like training flags (a flag "
        "of an inactive piece is refused, not ignored)"),
    Fix("override names known", "fairseq.checkpoint_utils:overwrite_args_by_name",
        model_overrides.known_names_only,
        "an override key that names nothing (`{'csan_windw': 5}`) is refused with the nearest known "
        "names; fairseq would set it where nothing reads it"),
    Fix("last batch kept", "fairseq.data.data_utils:batch_by_size", fairseq_fixes.keep_last_batch,
        "fairseq drops the last batch when its size is not a multiple of "
        "`--required-batch-size-multiple` (fairseq#5036): fairseq-generate would skip up to 7 test "
        "sentences and score an incomplete test set"),
    Fix("torchrun on CPU", "fairseq.distributed.utils:_infer_torch_distributed_launch_init",
        fairseq_fixes.cpu_safe_launch_init,
        "fairseq divides the rank by the number of GPUs: a torchrun launch without GPUs (gloo) could "
        "not start"),
    Fix("fine-tuning into new pieces", "fairseq.trainer:Trainer.load_checkpoint",
        finetune.marked_trainer_load,
        "marks fairseq-train's restores, where `--attn-init-new-params` may keep new pieces' "
        "parameters at their initialisation, and shows the plugin's reason instead of fairseq's "
        "'please ensure that the architectures match'"),
    Fix("untrainable model refused", "fairseq.trainer:Trainer.__init__", trainer_checks.checked_init,
        "a model the trainer's device cannot train (`--attn-backend flex` on CPU: torch has no "
        "flex_attention backward there) is refused in one line before any step, instead of failing "
        "at its first training step with a `crash.pt` left behind"),
    Fix("resumed epochs' batches", "fairseq.trainer:Trainer.get_train_iterator",
        resumed_batches.kept_iterator_as_at_epoch_one,
        "fairseq groups the sentences into batches with a seed that includes the epoch the "
        "iterator is made for, and keeps that iterator across epochs: a run resumed in a later "
        "epoch trained on other batches than the uninterrupted run (parameters apart from the first "
        "update after the resume); the kept iterator is made as at epoch 1, so a resumed run is "
        "bit-identical to the uninterrupted one on CPU"),
    *(Fix(f"{kind} loss scaler {what}", f"fairseq.optim.fp16_optimizer:{mixin}.{method}", replace,
          "fairseq saved the fp16 loss scale but not the scaler's counters: a resumed `--fp16` or "
          "`--memory-efficient-fp16` run doubled its scale at other updates than the uninterrupted "
          "run; the counters are saved beside the scale and restored with it")
      for kind, mixin in (("fp16", "_FP16OptimizerMixin"), ("memory-efficient fp16", "_MemoryEfficientFP16OptimizerMixin"))
      for what, method, replace in (("saved", "state_dict", loss_scaler_state.with_counters),
                                    ("restored", "load_state_dict", loss_scaler_state.counters_restored))),
    Fix("no abort at exit", "fairseq.data.iterators:BufferedIterator._create_consumer",
        exit_safety.parked_at_exit,
        "fairseq's batch reader thread, still collating the next batch when training ends, was ended "
        "inside torch's C++ code at interpreter shutdown: `terminate called without an active "
        "exception`, exit status 134 after the last checkpoint was saved; at exit each reader is "
        "first let finish that batch (at most 30 s)"),
    *(Fix(f"optimizer {method} without dynamo", f"torch.optim.optimizer:Optimizer.{method}",
          optimizer_methods.undecorated_until_dynamo,
          "torch imported TorchDynamo at the first call of each (about 2 s of CPU in every training "
          "process: the optimizer's constructor calls `add_param_group`) to run it outside a compiled "
          "region; while `torch._dynamo` is not imported nothing compiles, so the method runs as it is, "
          "after that torch's decorated one")
      for method in optimizer_methods.METHODS),
    Fix("one-line refusals", "sys:excepthook", _refusals_hook,
        "in fairseq's commands and ours, a refused flag, override or checkpoint prints `error: "
        "MESSAGE` (no 20-line traceback through fairseq); scripts, notebooks and pytest keep "
        "Python's", when=refusals.running_command),
    Fix("one-line argument errors", "argparse:ArgumentParser.error", _one_line_parser_error,
        "in the programs parsing fairseq's command line, an argparse error prints one line with "
        "the nearest known flag, not fairseq's 190-line usage", when=refusals.fairseq_parser_command),
)


def markdown_table() -> str:
    """The table of docs/explanation/architecture.md (between ``<!-- fixes -->`` markers; a test compares)."""
    rows = ["| fix | replaces | installed | why |", "|---|---|---|---|",
            "| checkpoint classes allowlisted | nothing: `torch.serialization.add_safe_globals` | always | "
            "torch >= 2.6 loads with `weights_only=True`, which refuses the `argparse.Namespace` (and "
            "omegaconf, numpy and meter classes) every fairseq checkpoint holds; exactly those classes "
            "are allowed instead of `weights_only=False` (`checkpoint_safety.py`) |",
            "| tensorboardX notice dropped | nothing: a filter on `fairseq.tasks.text_to_speech`'s logger, "
            "added before fairseq is imported (`quiet_imports.py`) | always | "
            "every command's first line, and the only line `import fairseq_attn_plugins` printed, was "
            "fairseq's advice to install tensorboardX, which only that speech task uses; every other "
            "message passes |",
            "| known-harmless warnings filtered | nothing: `warnings.filterwarnings` on each one's message "
            "and category (`quiet_imports.HARMLESS_WARNINGS`) | always | "
            + "; ".join(f"`` {message} `` ({category.__name__}): {why}"
                        for category, message, why in quiet_imports.HARMLESS_WARNINGS) + " |",
            "| our commands' INFO lines dropped | nothing: `logging.basicConfig(level=WARNING)` before fairseq "
            "is imported, as fairseq's commands configure theirs (`quiet_imports.py`) | in our commands "
            "(`fairseq-attn-*`) and the recipes' steps (not the training step) | a command loading a "
            "checkpoint or building a model printed fairseq's data and dictionary sizes and the pieces "
            "per layer before its output; warnings and errors still print |",
            "| scikit-learn and scipy.stats deferred | nothing: while fairseq is imported, placeholders stand for "
            "`sklearn`, `sklearn.metrics` and `scipy.stats` in `sys.modules` and are taken out after; fairseq's "
            "`sentence_prediction` criterion and `audio_classification` task keep functions that import the "
            "real ones at their first call (`fairseq_attn_records/fairseq_import.py`) | in our commands "
            "importing the plugin before fairseq, the recipes' training step, fairseq's preprocess and "
            "generate as the recipes and the demo run them | loading the two libraries was about 1.2 s of "
            "every such process's 4 s start, for metrics of tasks translation never runs; a later import "
            "gets the real modules, a call the real function's result |"]
    for fix in FIXES:
        when = ("always" if fix.when is _always else
                "in fairseq's commands and ours" if fix.when is refusals.running_command else
                "in the programs parsing fairseq's command line")
        module, _, attribute = fix.target.partition(":")
        rows.append(f"| {fix.name} | `{module}.{attribute}` | {when} | {fix.why} |")
    return "\n".join(rows)


def install() -> None:
    """fairseq's checkpoint classes allowlisted, then every row of :data:`FIXES`, each once."""
    checkpoint_safety.install()
    for fix in FIXES:
        fix.install()

