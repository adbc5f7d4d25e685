"""The distance terms as data, and the one kernel family that runs them.

A position piece declares its relative structure (:class:`DistanceTerms`, returned by
``AttentionPiece.distance_terms``) instead of implementing a method per path. This folder
holds the declaration and every kernel that runs it:

* :mod:`.terms`: the declaration (:class:`DistanceTerms`), what the chooser knows of it at
  build (:class:`DistanceForm`) and the empty-row rule every kernel shares;
* :mod:`.modes`: the torch modes (one autograd Function, modes ``blocks``, ``kernel``,
  ``far``), around torch's fused kernels per device (:mod:`.fused`); the far-key split of a
  clip in :mod:`.far`;
* :mod:`.flex_forms`: the same declarations through flex_attention (the flex piece path);
* :mod:`.bias_path`: the distance-bias path (a bias of the distance alone as the fused
  kernel's mask);
* :mod:`.triton_configs`, :mod:`.triton_kernels`, :mod:`.triton_launch`, :mod:`.triton_path`:
  the Triton flash kernels of the same declarations (CUDA; imported only when a call runs
  them: the package needs no triton on CPU).

The paths live in :mod:`..`; this package imports no path module at import (the paths import
it: :mod:`..base` reads :class:`DistanceForm`).
"""

from .fused import HAVE_CPU_KERNEL, KERNELS, NO_CPU_KERNEL, DeviceKernels  # noqa: F401
from .modes import MODES, NEGLIGIBLE_EXP, DistanceAttention, Plan, distance_attention  # noqa: F401
from .terms import INF, DistanceForm, DistanceTerms, without_keys  # noqa: F401
