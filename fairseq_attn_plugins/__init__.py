"""fairseq_attn_plugins: improved self-attention for fairseq machine translation.

Load with ``fairseq-train --user-dir fairseq_attn_plugins`` (or ``pip install``
the package and point ``--user-dir`` at its folder). Importing it registers the
``transformer_attn`` model, its architectures, and makes fairseq checkpoints
loadable under torch >= 2.6 without disabling ``weights_only``, and keeps
the last batch that fairseq's ``batch_by_size`` would drop, checks ``--model-overrides``
like training flags, lets fairseq-train start from a checkpoint without the new pieces'
parameters and, in fairseq's commands and this distribution's (never in a script or notebook
that imports it), prints the plugin's refusals and mistyped flags as one line (:mod:`.checkpoint_safety`,
:mod:`.integration`, :mod:`.models.finetune`).
"""

from .integration import quiet_imports

quiet_imports.install()  # before fairseq is imported

from . import checkpoint_safety  # noqa: E402
from .integration import fairseq_fixes, refusals  # noqa: E402

checkpoint_safety.install()
fairseq_fixes.install()
refusals.install()

from . import attention, models  # noqa: E402,F401
from .integration import model_overrides, trainer_checks  # noqa: E402
from .models import finetune  # noqa: E402

model_overrides.install()
finetune.install()
trainer_checks.install()

__version__ = "0.1.0"
