"""Every length threshold and block size that decides how a layer's attention runs, in one
frozen object (:class:`Policy`).

The chooser reads the thresholds (:func:`..choose`, through ``Layer.policy``) and the paths
hand the block sizes to their kernels (``Run.policy``), so one object decides both. A layer
holds :data:`DEFAULT` unless it is given another (``PluginSelfAttention(policy=...)``, or its
``policy`` attribute): a test lowers a threshold or a block size by passing a policy, and
every path of that layer then runs it. Measured on CPU at L = 512 (benchmarks/RESULTS.md);
the GPU figures of the same paths are the GPU issue's.
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
    #: query blocks, distance bias). Their CUDA entries (torch's memory-efficient kernel, which
    #: returns the log-sum-exp) are prepared but unmeasured: CUDA joins by measurement, on a
    #: device run (benchmarks/gpu_checks.sh), not by default
    distance_devices: Tuple[str, ...] = ("cpu",)

    def __post_init__(self):
        for name, value in vars(self).items():
            if name == "distance_devices":
                if not value or not set(value) <= {"cpu", "cuda"}:
                    raise ValueError(f"Policy.distance_devices must name 'cpu' and/or 'cuda' (got {value!r})")
            elif not isinstance(value, int) or value < 1:
                raise ValueError(f"Policy.{name} must be an integer >= 1 (got {value!r})")


#: what every layer runs unless it is given another policy
DEFAULT = Policy()
