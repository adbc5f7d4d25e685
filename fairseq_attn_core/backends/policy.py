"""Every length threshold and block size that decides how a layer's attention runs, in one
frozen object (:class:`Policy`).

The chooser reads the thresholds (:func:`..choose`, through ``Layer.policy``) and the paths
hand the block sizes to their kernels (``Run.policy``), so one object decides both. A layer
holds :data:`DEFAULT` unless it is given another (``PluginSelfAttention(policy=...)``, or its
``policy`` attribute): a test lowers a threshold or a block size by passing a policy, and
every path of that layer then runs it. Measured on CPU at L = 512 and, for the distance
kernels on CUDA, on an H200 at L = 512 and 1024 (benchmarks/RESULTS.md).
"""

from dataclasses import dataclass
from typing import Tuple


@dataclass(frozen=True)
class Policy:
    #: the block-local path (a band through SDPA on query blocks) from this many positions
    local_min_len: int = 256
    #: query rows per block of the block-local path; the band must be narrower than it
    local_block: int = 128
    #: on CUDA, inference through the flex band path from this many positions
    flex_band_min_len: int = 512
    #: on CPU, the region split and the query blocks from this many query positions
    blocked_min_len: int = 256
    #: on CPU, the distance-bias path from this many query positions
    distance_bias_min_len: int = 128
    #: query rows per block of the query-block path (forward and backward)
    query_block: int = 128
    #: query rows per block of the region split (the strip of each is ``block + 2k`` keys)
    region_block: int = 64
    #: query rows per block of the distance-bias path's backward
    distance_block: int = 128
    #: query rows per block of the flex path's window scores (relpos's value term)
    band_block: int = 32
    #: the devices on which ``auto`` takes the paths of the distance kernels (region split,
    #: query blocks, distance bias) for every call they run: the CPU, where they were measured
    #: faster (benchmarks/RESULTS.md, "CPU"); ``("cpu", "cuda")`` takes them on CUDA too for
    #: every call (the benchmark's ``--distance-devices cpu,cuda``)
    distance_devices: Tuple[str, ...] = ("cpu",)
    #: on CUDA, where ``distance_devices`` does not list it: the distance forms (properties of
    #: ``DistanceForm``) whose *training* calls ``auto`` runs through the region split and the
    #: distance bias, from ``cuda_training_min_len`` positions. Measured on an H200 (torch
    #: 2.11, base encoder forward + backward, fp16 and bf16; benchmarks/RESULTS.md, "GPU checks
    #: (H200, 2026-11-27)"), time to stock, the kernels vs what auto took before:
    #:
    #: * ``values``, relpos kv / tied (the region split; the explicit path otherwise): 4.72x vs
    #:   8.21x (L = 512), 6.87x vs 15.97x (1024, memory 1.76x vs 4.83x), bf16 4.97x vs 12.56x;
    #: * ``learned_bias``, t5bias (the distance bias; otherwise SDPA with a bias that requires
    #:   grad, off its fast kernels): 4.31x vs 8.52x, 6.75x vs 39.14x (memory 1.59x vs 4.17x),
    #:   bf16 4.35x vs 8.19x.
    #:
    #: Not listed, slower there: alibi's slopes (fused 1.15x vs 3.52x) and relpos ``k`` (fused
    #: 1.67x vs 3.79x). Not measured on CUDA, so not taken there: the query blocks (the
    #: decoder), inference calls (the flex piece or SDPA as before), lengths below 512 (at WMT
    #: lengths t5bias trained equally fast either way, within +-12-26 % noise)
    cuda_training_forms: Tuple[str, ...] = ("values", "learned_bias")
    #: the shortest query length of those CUDA training calls (the sweep measured 512 and 1024)
    cuda_training_min_len: int = 512
    #: on CUDA, the distance forms (properties of ``DistanceForm``: ``bias_kernel`` for t5bias
    #: and alibi, ``learned_bias`` for t5bias alone, ``keys`` for relpos k) that ``auto`` runs through the Triton
    #: kernels (:mod:`.distance.triton_path`), every call, from ``triton_min_len`` positions.
    #: None by default: built and tested on CPU under Triton's interpreter (2026-11-28), not
    #: yet timed on a GPU; benchmarks/gpu_checks.sh is the run that decides
    triton_forms: Tuple[str, ...] = ()
    #: the shortest query length of the Triton path's calls
    triton_min_len: int = 1
    #: ``--attn-backend tuned`` (:mod:`.tuning`): the timed rounds per candidate path, after
    #: one warm-up (the fastest round counts)
    tune_rounds: int = 3
    #: ``--attn-backend tuned``: a shape class's length bucket is the next power of two of its
    #: key length, at least this
    tune_min_bucket: int = 16

    def __post_init__(self):
        for name, value in vars(self).items():
            if name == "distance_devices":
                if not value or not set(value) <= {"cpu", "cuda"}:
                    raise ValueError(f"Policy.distance_devices must name 'cpu' and/or 'cuda' (got {value!r})")
            elif name == "cuda_training_forms":
                if not isinstance(value, tuple) or not set(value) <= set(FORM_PROPERTIES):
                    raise ValueError(f"Policy.cuda_training_forms must be a tuple of {list(FORM_PROPERTIES)} "
                                     f"(got {value!r})")
            elif name == "triton_forms":
                if not isinstance(value, tuple) or not set(value) <= set(TRITON_FORMS):
                    raise ValueError(f"Policy.triton_forms must be a tuple of {list(TRITON_FORMS)} (got {value!r})")
            elif not isinstance(value, int) or value < 1:
                raise ValueError(f"Policy.{name} must be an integer >= 1 (got {value!r})")


#: the properties of a layer's ``DistanceForm`` that ``Policy.cuda_training_forms`` may name
FORM_PROPERTIES = ("keys", "values", "learned_bias")

#: the properties of a layer's ``DistanceForm`` that ``Policy.triton_forms`` may name (the
#: Triton kernels run a bias of the distance, or Shaw's key table without a value table)
TRITON_FORMS = ("bias_kernel", "learned_bias", "keys")

#: what every layer runs unless it is given another policy
DEFAULT = Policy()
