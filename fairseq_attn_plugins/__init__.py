"""fairseq_attn_plugins: improved self-attention for fairseq machine translation.

Load with ``fairseq-train --user-dir fairseq_attn_plugins`` (or ``pip install``
the package and point ``--user-dir`` at its folder). Importing it registers the
``transformer_attn`` model and its architectures (the attention core, with its pieces,
is the torch-only package :mod:`fairseq_attn_core`), and installs the plugin's fixes of
fairseq, each once (:mod:`.integration.fixes`, listed in docs/explanation/architecture.md): fairseq
checkpoints load under torch >= 2.6 without disabling ``weights_only``, the last batch that
fairseq's ``batch_by_size`` would drop is kept, ``--model-overrides`` are checked like training
flags, fairseq-train can start from a checkpoint without the new pieces' parameters, a training
that ends does not abort at exit in fairseq's batch reader thread and, in
fairseq's commands and this distribution's (never in a script or notebook that imports it),
the plugin's refusals and mistyped flags print as one line and, in a command that imports the
plugin before fairseq, fairseq is imported without scikit-learn and scipy.stats
(:mod:`fairseq_attn_records.fairseq_import`). Importing it prints nothing: fairseq's tensorboardX
notice and torch's known-harmless warnings are dropped by message, and this distribution's
commands print their output without INFO lines (:mod:`.integration.quiet_imports`).
fairseq-attn-bench, -export and -pieces register it after reading their arguments (:mod:`.registration`).
"""

from . import registration
from .integration import quiet_imports

quiet_imports.install()  # before fairseq is imported
if not registration.reads_arguments_first():  # those commands load it once their arguments are read
    registration.register()

__version__ = "0.1.0"
