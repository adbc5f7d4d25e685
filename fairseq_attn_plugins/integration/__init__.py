"""How the plugin fits into fairseq 0.12 and torch, as opposed to what it computes:

* :mod:`.checkpoint_safety` -- fairseq checkpoints load under torch's ``weights_only=True`` with
  fairseq's own classes allowlisted; corrupt and unsafe files named in one line;
* :mod:`.fairseq_fixes` -- fairseq's ``batch_by_size`` keeps the last batch;
* :mod:`.model_overrides` -- ``--model-overrides`` checked like training flags;
* :mod:`.refusals` -- the plugin's refusals as one line in fairseq's commands (no traceback);
* :mod:`.finetune` -- fairseq-train starting from a checkpoint without the pieces' parameters;
* :mod:`.loading` -- fairseq's loaders and the hub interface with the above in place
  (public name: :mod:`fairseq_attn_plugins.loading`).

Installed by the package's ``__init__`` (so by ``--user-dir``) before anything reads a checkpoint.
"""
