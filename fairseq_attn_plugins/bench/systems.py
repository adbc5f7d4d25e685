"""What is compared: stock fairseq and every transformer_attn architecture, their targets
(speed targets, relpos/windowed memory targets); the size presets, from
:mod:`fairseq_attn_plugins.bench_presets` (torch-free: the command reads them before torch)."""

import argparse
import fnmatch
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ..bench_presets import DTYPE_NAMES, PRESETS  # noqa: F401

STOCK = "fairseq"
#: the Table 1 baseline through the plugin (``transformer_attn_wmt_en_de``): the rows' ratios are to it
BASELINE = "attn"

# ---------------------------------------------------------------------------
# Speed targets (training throughput ratio to stock fairseq). Matched by
# variant name (fnmatch patterns, first match wins); a variant with no match has
# no stated target and is reported as "n/a", never as a pass.
# ---------------------------------------------------------------------------
SPEED_TARGETS = [
    ("attn", 0.98),
    ("csan1d", 0.95), ("disan*", 0.95), ("bidirect", 0.95), ("drop*", 0.95),
    ("csan2d", 0.93), ("relpos*", 0.93), ("rel_pos*", 0.93),
    ("chain*", 0.80), ("conv*", 0.80),
]
MEMORY_TARGET = 1.10  # for systems whose attention stays on the fused path
# relpos kv (k = 16, on the flex path): memory at WMT lengths, and at L = 1024
# in the sweep throughput >= 0.7 and memory <= 1.5.
MEMORY_TARGETS = [("relpos*", 1.15), ("rel_pos*", 1.15)]
LONG_TARGETS = [("relpos*", 1024, 0.7, 1.5)]
WINDOWED = ["csan*"]  # should beat the dense baseline at length >= LONG
LONG = 512


def speed_target(variant: str) -> Optional[float]:
    for pattern, target in SPEED_TARGETS:
        if fnmatch.fnmatchcase(variant, pattern):
            return target
    return None


def memory_target(variant: str, fused_only: bool) -> Optional[float]:
    for pattern, target in MEMORY_TARGETS:
        if fnmatch.fnmatchcase(variant, pattern):
            return target
    return MEMORY_TARGET if fused_only else None


def is_windowed(variant: str) -> bool:
    return any(fnmatch.fnmatchcase(variant, p) for p in WINDOWED)


#: fairseq's transformer_wmt_en_de / transformer_vaswani_wmt_en_de_big sizes
FAIRSEQ_SIZES = {"base": dict(embed=512, ffn=2048, heads=8, layers=6),
                 "big": dict(embed=1024, ffn=4096, heads=16, layers=6)}


def scaling_sizes(cfg: dict) -> dict:
    """Sizes of the stock base and big models of the base-vs-big check: fairseq's own on the
    GPU presets, else the preset's and the same doubled in width (as big doubles base)."""
    if cfg["sizes"] is None:
        return dict(FAIRSEQ_SIZES)
    s = cfg["sizes"]
    return {"base": dict(s), "big": dict(s, embed=2 * s["embed"], ffn=2 * s["ffn"], heads=2 * s["heads"])}


DTYPES = dict(zip(DTYPE_NAMES, (torch.float32, torch.float16, torch.bfloat16)))


# ---------------------------------------------------------------------------
# Systems: stock fairseq + every registered transformer_attn architecture
# ---------------------------------------------------------------------------
@dataclass
class System:
    name: str  # "fairseq" or the variant ("attn", "csan1d", ...)
    arch: str
    target: Optional[float]
    #: extra model flags (attribute -> value), e.g. ``{"attn_backend": "explicit"}``
    flags: dict = field(default_factory=dict)
    #: the devices on which its layers' ``auto`` takes the distance kernels
    #: (``Policy.distance_devices``); ``None``: the layers' default policy
    distance_devices: Optional[Tuple[str, ...]] = None
    #: the system this one is measured next to: the same model under the first policy
    same_model_as: Optional[str] = None


#: the position methods of the CPU length sweep (``--sweep lengths``): name, arch, flags
POSITION_METHODS = [
    ("relpos_k", "transformer_relpos_wmt_en_de", {"relpos_mode": "k"}),
    ("relpos_kv", "transformer_relpos_wmt_en_de", {}),
    ("rope", "transformer_rope_wmt_en_de", {}),
    ("alibi", "transformer_alibi_wmt_en_de", {}),
    ("t5bias", "transformer_t5bias_wmt_en_de", {}),
    ("csan1d", "transformer_csan1d_wmt_en_de", {}),
    ("csan2d", "transformer_csan2d_wmt_en_de", {}),
]
#: the paths that can train on CPU (flex_attention has no backward there); ``auto`` is
#: listed where it chooses a path ``fused`` cannot force (relpos k/kv: the region split;
#: alibi, t5bias: the distance-bias path)
CPU_TRAIN_PATHS = ("explicit", "fused")
CPU_OWN_AUTO = ("relpos_k", "relpos_kv", "alibi", "t5bias")
#: the methods with a flex_attention path (its own, or the CSAN band): on CUDA the sweep
#: also forces ``flex`` for them (``auto`` trains without it)
FLEX_METHODS = ("relpos_kv", "alibi", "csan1d", "csan2d")


def position_sweep_systems(patterns: Optional[List[str]] = None, device_type: str = "cpu") -> List[System]:
    """Stock fairseq, then each position method on each training path of the device
    (``name/path``): on CPU explicit and fused (and ``auto`` where it picks another path);
    on CUDA also ``auto`` for every method and ``flex`` for those with a flex path."""
    from fairseq_attn_plugins import registration

    registration.register()
    from fairseq_attn_core import PieceConfigError
    from fairseq_attn_core.backends import check_backend

    systems = [System(STOCK, "transformer_wmt_en_de", None)]
    for name, arch, flags in POSITION_METHODS:
        flex = ("flex",) if device_type == "cuda" and name in FLEX_METHODS else ()
        for path in CPU_TRAIN_PATHS + flex + ("auto",):
            try:
                check_backend(path, ["relpos"] if name == "relpos_kv" else [], 0.0)
            except PieceConfigError:
                continue  # fused cannot run relpos kv
            if path == "auto" and device_type == "cpu" and name not in CPU_OWN_AUTO:
                continue  # auto on CPU is the fused path for these
            systems.append(System(f"{name}/{path}", arch, None, dict(flags, attn_backend=path)))
    if patterns:
        keep = [s for s in systems[1:] if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)]
        if not keep:
            raise ValueError(f"--systems {patterns} matches none of {[s.name for s in systems[1:]]}")
        systems = systems[:1] + keep
    return systems


def discover_systems(big: bool = False, patterns: Optional[List[str]] = None) -> List[System]:
    """Stock fairseq first, then every architecture registered for ``transformer_attn``."""
    from fairseq_attn_plugins import registration
    registration.register()  # the model and its architectures
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    from ..models import is_attn_arch

    suffix = "_vaswani_wmt_en_de_big" if big else "_wmt_en_de"
    systems = [System(STOCK, "transformer" + suffix, None)]
    for arch in ARCH_MODEL_NAME_REGISTRY:
        if not is_attn_arch(arch) or not arch.startswith("transformer_") or not arch.endswith(suffix):
            continue
        variant = arch[len("transformer_"): -len(suffix)]
        if not big and variant.endswith("_vaswani"):
            continue
        systems.append(System(variant, arch, speed_target(variant)))
    if patterns:  # a variant's name or its architecture
        keep = [s for s in systems[1:] if any(fnmatch.fnmatchcase(s.name, p) or fnmatch.fnmatchcase(s.arch, p)
                                              for p in patterns)]
        if not keep:
            names = [s.name for s in systems[1:]]
            raise ValueError(f"--systems {patterns} matches none of the registered variants {names} "
                             f"(nor their architectures transformer_<variant>{suffix})")
        systems = systems[:1] + keep
    return systems


class _FakeTask:
    def __init__(self, dictionary, tgt_dictionary=None):
        self.source_dictionary = dictionary
        self.target_dictionary = dictionary if tgt_dictionary is None else tgt_dictionary


def make_dictionary(n_symbols: int):
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(n_symbols - d.nspecial):
        d.add_symbol(f"w{i}")
    d.finalize(padding_factor=8)
    return d


def build_model(arch: str, dictionary, sizes: Optional[dict], seed: int, tgt_dictionary=None, **extra):
    """Build ``arch`` without the CLI. Same seed -> same initial weights. One dictionary: all
    embeddings shared; ``tgt_dictionary``: the target's own (give ``share_all_embeddings=False``)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    extra.setdefault("max_source_positions", 1024)
    extra.setdefault("max_target_positions", extra["max_source_positions"])
    args = argparse.Namespace(**{"share_all_embeddings": True, **extra})
    if sizes:
        for side in ("encoder", "decoder"):
            setattr(args, f"{side}_embed_dim", sizes["embed"])
            setattr(args, f"{side}_ffn_embed_dim", sizes["ffn"])
            setattr(args, f"{side}_attention_heads", sizes["heads"])
            setattr(args, f"{side}_layers", sizes["layers"])
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(seed)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, _FakeTask(dictionary, tgt_dictionary))


def with_distance_devices(systems: List[System], choices: Sequence[Tuple[str, ...]]) -> List[System]:
    """Each system but stock under each device list of ``choices`` (the devices of its
    distance kernels, :func:`apply_distance_devices`; one choice:
    every system under it, names kept; several: the first keeps the names, the others are
    added as ``name@cpu+cuda``, to be measured next to it in the same rounds)."""
    if not choices:
        return systems
    out = [systems[0]]
    for s in systems[1:]:
        for i, devices in enumerate(choices):
            other = dict(name=f"{s.name}@{'+'.join(devices)}", same_model_as=s.name) if i else {}
            out.append(replace(s, distance_devices=tuple(devices), **other))
    return out


def apply_distance_devices(model, devices: Optional[Tuple[str, ...]]) -> None:
    """Give every self-attention layer of ``model`` a policy that takes the distance kernels
    on exactly ``devices``, for every call they run: ``distance_devices`` is ``devices`` and
    ``cuda_training_forms`` empty (``("cpu",)``: none on CUDA, as auto before its CUDA
    measurement); its other fields kept. ``None`` leaves the layers as built."""
    if devices is None:
        return
    from fairseq_attn_core import SelfAttention

    for m in model.modules():
        if isinstance(m, SelfAttention):
            m.policy = replace(m.policy, distance_devices=tuple(devices), cuda_training_forms=())


def layer_paths(module, length: int) -> Dict[str, int]:
    """Path name -> how many self-attention layers under ``module`` run a training call of
    ``length`` positions on it (the chooser asked as the layer asks it: the length-dependent
    paths, region split, distance bias, block-local, flex band, show)."""
    from fairseq_attn_core import SelfAttention, backends

    counts: Dict[str, int] = {}
    for m in module.modules():
        if isinstance(m, SelfAttention):
            path = m.path_for(backends.Call(tgt_len=length, src_len=length, dropout_p=m.dropout_module.p,
                                            on_cuda=m.q_proj.weight.is_cuda,
                                            attn_mask=m.site.side == "decoder", backward=True))
            counts[path.name] = counts.get(path.name, 0) + 1
    return counts


def attention_paths(model) -> Dict[str, int]:
    """How many self-attention modules run fused / flex (relpos kv/tied, alibi) / explicit (training, no weights)."""
    counts = {"fused": 0, "flex": 0, "explicit": 0, "query blocks": 0, "region split": 0, "distance bias": 0}
    for path, n in layer_paths(model, 1).items():
        name = "flex" if path == "flex piece" else path
        counts[name if name in counts else "fused"] += n  # block-local, flex band: SDPA-like
    return counts


