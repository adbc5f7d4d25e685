"""torch's optimizer methods run without importing TorchDynamo while nothing can be compiling.

torch decorates ``Optimizer.add_param_group``, ``zero_grad``, ``state_dict`` and ``load_state_dict``
with ``torch._disable_dynamo``, which imports ``torch._dynamo`` at the first call, to run the method
outside any compiled region: about 2 s of CPU in every fairseq-train process (its optimizer's
constructor calls ``add_param_group``), though no training of fairseq's compiles. While
``torch._dynamo`` is not imported nothing can be compiling (``torch.compile`` imports it), so the
method itself runs, as dynamo's ``disable`` runs it outside a compiled region; once it is imported
(a compiled model, a user's script), torch's decorated method runs. What a training computes and
saves does not change. Installed by :mod:`.fixes`.
"""

import functools
import sys

#: the methods of ``torch.optim.Optimizer`` that torch 2.13 decorates with ``torch._disable_dynamo``
#: (a method another torch does not decorate runs as it is)
METHODS = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")


def undecorated_until_dynamo(original):
    """``original`` (torch's decorated method) once ``torch._dynamo`` is imported; before, the method
    it decorates (its ``__wrapped__``; ``original`` itself where torch does not decorate it)."""
    plain = getattr(original, "__wrapped__", original)

    @functools.wraps(original)
    def method(*args, **kwargs):
        if "torch._dynamo" in sys.modules:
            return original(*args, **kwargs)
        return plain(*args, **kwargs)

    return method
