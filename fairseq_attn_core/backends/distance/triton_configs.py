"""The block sizes of the Triton kernels, as data: one :class:`BlockConfig` per kernel and
head size (the head size rounded up to a power of two, at least 16). Hopper's and Ampere's head
size 64: per form the blocks with the fewest modelled cycles and no spill inside a loop, causal or
not, in benchmarks/triton_static_cost.py (no GPU); the others from FA2's Triton tutorial's defaults.
Not timed: the device run (benchmarks/gpu_checks.sh) times them. A call may pass its own (the CPU tests use 16 x 16 tiles, so that T = 33 spans
three tiles). No triton import: the chooser and the tests read these on any machine.
"""

from dataclasses import dataclass
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class BlockConfig:
    block_m: int  # query rows per tile
    block_n: int  # key columns per tile
    num_warps: int = 4
    num_stages: int = 2


@dataclass(frozen=True)
class KernelConfigs:
    """One config for the forward, the backward's key-side kernel (dk, dv) and its query-side
    kernel (dq, dQA, the table's per-distance sums), and the forward with Shaw's value term
    (its PB's interior, (block_m, 2k - 1 rounded up to a power of two) float32, sits in
    registers beside the output: smaller tiles)."""

    forward: BlockConfig
    backward_kv: BlockConfig
    backward_q: BlockConfig
    forward_values: BlockConfig
    #: smaller tiles (fewer registers) where band tiles do more per pair; None: the plain
    #: ones. backward_q with Shaw's tables (it reads QA per pair and bins dQA), with a learned
    #: table's gradient (per-distance sums: block_m <= block_n), backward_kv with Shaw's value
    #: term (it reads dPB per pair)
    backward_q_terms: Optional[BlockConfig] = None
    backward_q_table: Optional[BlockConfig] = None
    backward_kv_values: Optional[BlockConfig] = None
    #: backward_kv with Shaw's key term (it reads QA per pair)
    backward_kv_keys: Optional[BlockConfig] = None
    #: backward_kv with its far tiles in one loop (:func:`far_tiles_merged`), where the lengths fill whole tiles
    #: (partial ones spill at these blocks), in its FEW_REGS form: a bias by bucket alone (t5bias; fewer queries a
    #: tile narrow its band), Shaw's key term alone
    backward_kv_bias: Optional[BlockConfig] = None
    backward_kv_keys_merged: Optional[BlockConfig] = None
    #: the forward's blocks where the lengths leave a partial tile at the blocks above (masked loads, more
    #: registers), with alibi's slopes or Shaw's key term (not its value term); None: the blocks above
    forward_partial: Optional[BlockConfig] = None
    #: the GPU's tensor cores take 64-row tiles per warp group (Hopper): backward_q makes its share
    #: of Shaw's key-table gradient as q^T dQA (head-size rows), not dQA^T q (2k rows, a narrower dot)
    warpgroup_mma: bool = False
    #: backward_q's and the forward's far tiles with Shaw's terms, this many keys wide where their band tiles are
    #: narrower (:func:`wide_far_tiles`); None: block_n
    backward_q_keys_far: Optional[int] = None
    forward_keys_far: Optional[int] = None
    #: backward_delta's rows and warps (it has no key tiles: block_n 0); None: backward_q's rows on 4 warps. More
    #: rows, fewer programs; with Shaw's value term, fewer shares of d a_V for torch to sum
    backward_delta: Optional[BlockConfig] = None
    #: the moved-back last tile after the far loop in every form (:func:`peel_last_tile`): alibi's forward and
    #: backward_q with a table's gradient then spill 4 to 12 B outside their loops and cost less (Hopper, modelled)
    peel_every_form: bool = False


#: head size (power of two) -> the kernels' blocks; a head size above the largest is refused
_BWD = BlockConfig(64, 64, 4, 2)
CONFIGS: Dict[int, KernelConfigs] = {
    16: KernelConfigs(BlockConfig(128, 64, 4, 3), _BWD, _BWD, BlockConfig(64, 64, 4, 2), warpgroup_mma=True),
    32: KernelConfigs(BlockConfig(128, 64, 4, 3), _BWD, _BWD, BlockConfig(64, 64, 4, 2), warpgroup_mma=True),
    64: KernelConfigs(BlockConfig(128, 64, 4, 2), BlockConfig(64, 128, 8, 2), _BWD, BlockConfig(64, 32, 4, 2),
                      backward_q_terms=BlockConfig(64, 32, 4, 2), backward_q_table=BlockConfig(64, 64, 4, 2),
                      backward_kv_values=BlockConfig(32, 64, 4, 2), backward_kv_keys=BlockConfig(32, 64, 4, 2),
                      backward_kv_bias=BlockConfig(32, 128, 4, 2), backward_kv_keys_merged=BlockConfig(64, 128, 8, 2),
                      forward_partial=BlockConfig(128, 32, 4, 2), warpgroup_mma=True,
                      backward_q_keys_far=64, forward_keys_far=64, backward_delta=BlockConfig(256, 0, 8, 1),
                      peel_every_form=True),
    128: KernelConfigs(BlockConfig(128, 64, 8, 2), BlockConfig(64, 64, 8, 2), BlockConfig(64, 64, 8, 2),
                       BlockConfig(64, 64, 8, 2), warpgroup_mma=True),
}

#: the same for GPUs before Hopper (sm_80 A100, sm_86, sm_89): the tensor cores' operands and
#: accumulators all sit in registers there, so the tiles are smaller; per kernel the blocks with the fewest
#: modelled cycles on sm_80 (head size 64) that spill inside no loop, whole tiles and partial, padded or not
AMPERE: Dict[int, KernelConfigs] = {
    block: KernelConfigs(BlockConfig(128, 32, 4, 2), BlockConfig(32, 64, 4, 2), BlockConfig(64, 64, 4, 2),
                         BlockConfig(64, 32, 4, 2), backward_q_terms=BlockConfig(64, 32, 4, 2),
                         backward_q_table=BlockConfig(32, 64, 4, 2), backward_kv_values=BlockConfig(64, 32, 4, 2),
                         forward_partial=BlockConfig(64, 32, 4, 2), backward_q_keys_far=64)
    for block in (16, 32, 64)
}

#: the CPU interpreter's tiles (tests, the dry device run)
_TINY = BlockConfig(16, 16, 1, 1)
SMALL = KernelConfigs(_TINY, _TINY, _TINY, _TINY, backward_delta=BlockConfig(32, 0, 1, 1))


@dataclass(frozen=True)
class Form:
    """What one call's kernels compute, as the choice of their blocks reads it."""

    bias: int = 0  # 0 none, 1 a table by bucket (t5bias), 2 alibi's slopes
    keys: bool = False  # Shaw's key term
    values: bool = False  # Shaw's value term
    causal: bool = False  # the decoder's mask
    table_grad: bool = False  # a learned table's gradient (backward_q's sums per distance)


@dataclass(frozen=True)
class Blocks:
    """The blocks of one call's kernels, and backward_kv's FEW_REGS form (its blocks fit only with it)."""

    forward: BlockConfig
    backward_q: BlockConfig
    backward_kv: BlockConfig
    few_regs: bool = False
    backward_q_far: int = 0  # backward_q's far tiles' width, wider than its band tiles (0: its block_n for both)
    forward_far: int = 0  # the same for the forward
    forward_shift: bool = False  # the forward's last key tile moved back to end at the last key (:func:`shift_last_tile`)
    backward_q_shift: bool = False  # the same for backward_q
    backward_kv_shift: bool = False  # backward_kv's last query tile moved back to end at the last query
    forward_peel: bool = False  # the forward's moved-back tile run after its far loop (:func:`peel_last_tile`)
    backward_q_peel: bool = False  # the same for backward_q (backward_kv's always is)
    band_shift: bool = True  # the band loops' last tile moved back too, in every kernel (:func:`shift_band_tiles`)
    backward_delta: Optional[BlockConfig] = None  # backward_delta's rows and warps


def even(config: BlockConfig, T: int, S: int) -> Tuple[bool, bool]:
    """Whether T queries, and S keys, fill whole tiles of ``config``'s blocks (the kernels' EVEN_M, EVEN_N:
    their loads then go unmasked)."""
    return T % config.block_m == 0, S % config.block_n == 0


def whole(config: BlockConfig, T: int, S: int) -> bool:
    """Whether both fill whole tiles."""
    return all(even(config, T, S))


def far_tiles_merged(form: Form, kernel: str) -> bool:
    """Whether ``kernel`` ("forward", "backward_kv") runs the far tiles of both sides in one loop (one
    pipeline prologue less): terms with one value a side per row, without the causal mask. A bias by
    bucket in both; Shaw's terms in backward_kv only (the forward's merged loop cost more, modelled:
    docs/results/distance_kernel_cost_steps.md)."""
    if form.causal:
        return False
    if form.keys:
        return kernel == "backward_kv"
    return form.bias == 1


def choose(configs: KernelConfigs, form: Form, T: int, S: int) -> Blocks:
    """The blocks of a call: each kernel's plain blocks, replaced by those of the terms that do more per
    pair; where the lengths leave a partial tile, the forward's ``forward_partial`` blocks and never the
    merged backward_kv's (their masked loads spill there)."""

    def partial(config: BlockConfig, other: Optional[BlockConfig]) -> BlockConfig:
        return other if other is not None and not whole(config, T, S) else config

    forward = configs.forward_values if form.values else configs.forward
    if (form.bias == 2 and not shift_last_tile(forward.block_n, forward.block_n, S)) or (form.keys and not form.values):
        # alibi's slopes (where its last key tile is not moved back: masked loads), Shaw's key term alone
        forward = partial(forward, configs.forward_partial)
    backward_q = configs.backward_q
    if form.keys:
        backward_q = configs.backward_q_terms or backward_q
    if form.table_grad:
        backward_q = configs.backward_q_table or backward_q
    backward_kv, few_regs = configs.backward_kv, False
    if form.keys:
        backward_kv = configs.backward_kv_keys or backward_kv
    if form.values:
        backward_kv = configs.backward_kv_values or backward_kv
    else:
        merged = configs.backward_kv_keys_merged if form.keys else configs.backward_kv_bias
        if far_tiles_merged(form, "backward_kv") and merged is not None and whole(merged, T, S):
            backward_kv, few_regs = merged, True
    q_far = wide_far_tiles(configs.backward_q_keys_far, form, backward_q, S)
    forward_far = wide_far_tiles(configs.forward_keys_far, form, forward, S)
    forward_shift = shift_last_tile(forward.block_n, max(forward.block_n, forward_far), S)
    backward_q_shift = shift_last_tile(backward_q.block_n, max(backward_q.block_n, q_far), S)
    return Blocks(forward, backward_q, backward_kv, few_regs, q_far, forward_far, forward_shift, backward_q_shift,
                  shift_last_tile(backward_kv.block_m, backward_kv.block_m, T),
                  forward_shift and peel_last_tile(form, "forward", configs),
                  backward_q_shift and peel_last_tile(form, "backward_q", configs),
                  shift_band_tiles(form), configs.backward_delta or BlockConfig(backward_q.block_m, 0, 4, 1))


def shift_last_tile(tile: int, widest: int, length: int) -> bool:
    """Whether a kernel's loop over tiles of ``tile`` keys (the forward, backward_q) or queries (backward_kv)
    moves its last tile back to end at the ``length``-th, where the length leaves it partial: every tile's loads
    are then whole and unmasked, and the last tile masks what it shares with the one before (a vector: the keys'
    column, the queries' log-sum-exp), not a tile. Needs a length of at least the ``widest`` tile of the loops.
    Band tiles move only where :func:`shift_band_tiles` allows."""
    return length % tile != 0 and length >= widest


def shift_band_tiles(form: Form) -> bool:
    """Whether a band tile that reaches the length moves back too (else it stays, its loads masked): not with a
    bias by bucket (its band reads aligned copies from each tile's first position) nor a table's gradient (its
    per-distance sums carry from band tile to band tile). Far tiles read neither, so they move in every form."""
    return form.bias != 1 and not form.table_grad


def peel_last_tile(form: Form, kernel: str, configs: KernelConfigs) -> bool:
    """Whether ``kernel`` ("forward", "backward_q") runs its moved-back tile (:func:`shift_last_tile`) after the far
    loop that ends at the length, that loop then running whole tiles without the shift's per-tile work (backward_kv
    always does). Every form with ``configs.peel_every_form``; else not alibi's forward nor backward_q with a table's
    gradient: every tile of their far-right loops takes the shift (on sm_80 peeling costs them more, modelled)."""
    if configs.peel_every_form:
        return True
    if kernel == "forward":
        return form.bias != 2
    return not form.table_grad


def wide_far_tiles(wide: Optional[int], form: Form, config: BlockConfig, S: int) -> int:
    """The width of a kernel's far tiles where they are wider than its band tiles (0: not), these from a
    multiple of 16 (fewer band tiles), in the kernels whose band tiles are narrow: backward_q with Shaw's terms
    (its band tiles bin dQA), the forward with Shaw's value term (they bin PB) and with the key term where the
    lengths leave a partial tile (128 x 32 there: with wide far tiles, cheaper than 128 x 64, modelled). Those bins
    and loads hold the registers; a far tile only sums rows. Not under the causal mask (the band shrinks by no
    tile there: modelled, no gain), nor with a table's gradient, nor where the keys fill whole narrow tiles but
    not whole wide ones (the kernels' EVEN_N, one flag for both widths, would then be wrong for the last wide
    tile); a length that leaves a partial narrow tile masks or moves (:func:`shift_last_tile`) its last tile at
    both widths."""
    ok = (wide is not None and form.keys and not form.causal and not form.table_grad
          and wide > config.block_n and wide % config.block_n == 0 and (S % wide == 0 or S % config.block_n != 0))
    return wide if ok else 0


def head_block(head_dim: int) -> int:
    """The head size as the kernels tile it: the next power of two, at least 16."""
    return max(16, 1 << (head_dim - 1).bit_length())


def configs_for(head_dim: int, capability: Optional[Tuple[int, int]] = None) -> KernelConfigs:
    """The blocks for a head size on a GPU of compute ``capability`` (major, minor); None:
    Hopper's (the CPU interpreter's calls and the static report's sm_90 reading)."""
    block = head_block(head_dim)
    if block not in CONFIGS:
        raise ValueError(f"the Triton distance kernels take heads of at most {max(CONFIGS)} dimensions "
                         f"(got {head_dim})")
    if capability is not None and capability[0] < 9 and block in AMPERE:
        return AMPERE[block]
    return CONFIGS[block]
