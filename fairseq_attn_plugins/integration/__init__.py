"""How the plugin fits into fairseq 0.12 and torch, as opposed to what it computes:

* :mod:`.fixes` -- every function the plugin replaces, in one table, installed once by one function;
* :mod:`.fairseq_fixes` -- fairseq's ``batch_by_size`` keeps the last batch, torchrun on CPU;
* :mod:`.model_overrides` -- ``--model-overrides`` checked like training flags;
* :mod:`.refusals` -- the plugin's refusals as one line in fairseq's commands (no traceback);
* :mod:`.trainer_checks` -- a model the trainer's device cannot train (flex on CPU) refused when
  fairseq's ``Trainer`` is made, before any step;
* :mod:`.resumed_batches`, :mod:`.loss_scaler_state` -- a resumed run equal to the uninterrupted
  one: the batches of a later epoch, the fp16 loss scaler's counters;
* :mod:`.quiet_imports` -- fairseq's import-time tensorboardX notice dropped in the commands.

Beside them, public modules of the package: :mod:`fairseq_attn_plugins.checkpoint_safety`
(fairseq checkpoints load under torch's ``weights_only=True`` with fairseq's own classes
allowlisted; corrupt and unsafe files named in one line), :mod:`fairseq_attn_plugins.checkpoint_identity`
(what run a checkpoint is, read memory-mapped), :mod:`fairseq_attn_plugins.loading` (fairseq's
loaders and the hub interface with the above in place) and :mod:`fairseq_attn_plugins.models.finetune`
(fairseq-train starting from a checkpoint without the pieces' parameters).

Installed by the package's ``__init__`` (so by ``--user-dir``, :func:`.fixes.install`) before
anything reads a checkpoint.
"""
