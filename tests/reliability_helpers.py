"""Shared helpers of the reliability tests (numerics, faults, plot).

Everything loops over the registries, so a new piece in fairseq_attn_core/pieces/ is
covered without touching the tests: ``PIECES`` for module-level checks and the
``transformer_attn`` architectures for model-level ones. A piece makes itself
active on layer 0 of the tiny 2-layer model with the class attribute
``test_flags`` (flag attribute -> value).
"""

import argparse
import copy
import functools
import itertools
import os
import subprocess
import sys
from typing import Dict, List

import torch

import attn_helpers  # noqa: F401  (first: it imports fairseq without scikit-learn)
import fairseq_attn_plugins  # noqa: F401,E402  (registers model, archs, pieces)
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY
from fairseq.tasks.translation import TranslationTask
from fairseq_attn_core import PIECES, attention_defaults
from fairseq_attn_core.flags import MODEL_KEYS

TINY = {
    "encoder_layers": 2, "decoder_layers": 2,
    "encoder_embed_dim": 32, "decoder_embed_dim": 32,
    "encoder_ffn_embed_dim": 64, "decoder_ffn_embed_dim": 64,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4,
}


def cli(flags: Dict) -> List[str]:
    out = []
    for k, v in flags.items():
        out += ["--" + k.replace("_", "-"), str(v)]
    return out


TINY_CLI = cli(TINY)


def plugin_archs() -> List[str]:
    """Base-size architectures of the ``transformer_attn`` model (one per variant + baseline)."""
    return sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items()
                  if m == "transformer_attn" and not a.endswith("_big"))


# used only until a piece declares ``test_flags`` itself
_FALLBACK_TEST_FLAGS: Dict = {}


def piece_test_flags(piece_name: str) -> Dict:
    cls = PIECES[piece_name]
    flags = getattr(cls, "test_flags", None)
    if flags is None:
        flags = _FALLBACK_TEST_FLAGS.get(piece_name, {})
    return dict(flags)


def arch_pieces(arch: str) -> List[str]:
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    return [n.strip() for n in str(args.attn_pieces or "").split(",") if n.strip()]


def arch_test_flags(arch: str) -> Dict:
    flags = {}
    for name in arch_pieces(arch):
        flags.update(piece_test_flags(name))
    return flags


def compatible(names) -> bool:
    classes = [PIECES[n] for n in names]
    for a, b in itertools.permutations(classes, 2):
        if b.name in a.conflicts:
            return False
    return sum(c.expands_kv for c in classes) <= 1


def compatible_sets(max_size: int = 2) -> List[tuple]:
    """Every single piece and every compatible pair (sorted names)."""
    names = sorted(PIECES)
    out = [(n,) for n in names]
    if max_size >= 2:
        out += [p for p in itertools.combinations(names, 2) if compatible(p)]
    return out


def greedy_all_pieces() -> List[str]:
    """A greedy set of mutually compatible pieces (for one combined run)."""
    chosen: List[str] = []
    for n in sorted(PIECES):
        if compatible(chosen + [n]):
            chosen.append(n)
    return chosen


def dictionary(n_words: int = 20) -> Dictionary:
    d = Dictionary()
    for i in range(n_words):
        d.add_symbol(f"w{i}")
    return d


@functools.lru_cache(maxsize=None)
def _parsed(arch: str, cli_extra: tuple) -> argparse.Namespace:
    parser = options.get_training_parser(default_task="translation")
    return options.parse_args_and_arch(parser, ["/unused-data", "--arch", arch] + TINY_CLI + list(cli_extra))


def parse_args(arch: str, extra: Dict = None, cli_extra: List[str] = ()) -> argparse.Namespace:
    """Parse like ``fairseq-train`` would (model flags have no argparse defaults); each command
    line is parsed once per process, every caller gets its own copy."""
    args = copy.deepcopy(_parsed(arch, tuple(cli_extra)))
    for k, v in (extra or {}).items():
        setattr(args, k, v)
    return args


def build_model(arch: str, extra: Dict = None, cli_extra: List[str] = (), d: Dictionary = None):
    """Build through the task, as fairseq-train does (validation runs here)."""
    args = parse_args(arch, extra, cli_extra)
    d = d or dictionary()
    task = TranslationTask(args, d, d)
    return task.build_model(args), args, task


def plain_args(**flags) -> argparse.Namespace:
    """Namespace built for the core (the model sizes it reads, every plugin default), for
    module-level tests."""
    args = argparse.Namespace(**{k: v for k, v in TINY.items() if k in MODEL_KEYS}, **flags)
    attention_defaults(args)
    return args


def batch(d: Dictionary, lengths=(7, 2, 5), seed: int = 0):
    """A left-padded source batch (fairseq's default) and right-padded decoder input."""
    g = torch.Generator().manual_seed(seed)
    B, S = len(lengths), max(lengths)
    src = torch.full((B, S), d.pad())
    tgt = torch.full((B, S + 1), d.pad())
    prev = torch.full((B, S + 1), d.pad())
    for b, n in enumerate(lengths):
        words = torch.randint(d.nspecial, len(d), (n,), generator=g)
        src[b, S - n:] = torch.cat([words[: n - 1], torch.tensor([d.eos()])])
        t = torch.cat([words.flip(0)[: n - 1], torch.tensor([d.eos()])])
        tgt[b, :n] = t
        prev[b, 0] = d.eos()
        prev[b, 1:n] = t[: n - 1]
    return src, torch.tensor(lengths), prev, tgt


def nll(model, d, src, lengths, prev, tgt):
    logits, _ = model(src, lengths, prev)
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    return torch.nn.functional.nll_loss(lprobs.view(-1, lprobs.size(-1)), tgt.view(-1), ignore_index=d.pad())


# ---- fairseq command line runs (e2e tests) ---------------------------------
def bin_dir() -> str:
    return os.path.dirname(sys.executable)


def user_dir() -> str:
    return os.path.dirname(fairseq_attn_plugins.__file__)


def train_cmd(data: str, save_dir: str, arch: str, extra: List[str] = ()) -> List[str]:
    return [os.path.join(bin_dir(), "fairseq-train"), data, "--user-dir", user_dir(), "--arch", arch,
            *TINY_CLI, "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--cpu",
            "--save-dir", save_dir, "--num-workers", "0", "--no-progress-bar", "--disable-validation",
            *extra]


def env() -> Dict[str, str]:
    e = dict(os.environ)
    e.setdefault("OMP_NUM_THREADS", "1")
    e["PYTHONWARNINGS"] = "ignore"
    return e


def run(cmd: List[str], timeout: int = 300) -> str:
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                       env=env())
    if p.returncode != 0:
        raise AssertionError(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-4000:]}")
    return p.stdout


# ---- 2-process gloo worker (torch.multiprocessing, forked) -----------------
def ddp_worker(rank: int, world: int, port: int, archs: List[str], out_dir: str) -> None:
    """Train every arch 2 steps under torch DDP and under fairseq's legacy DDP.

    Each rank gets different data; afterwards the flattened parameters of all
    ranks are gathered and rank 0 records the largest difference. Errors (e.g.
    DDP's unused-parameter error) are recorded, not raised, so every arch runs.
    """
    import datetime
    import json
    import traceback

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from fairseq.models.distributed_fairseq_model import DistributedFairseqModel

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    d = dictionary()
    results = {}
    for arch in archs:
        for wrapper in ("torch_ddp", "fairseq_legacy_ddp"):
            key = f"{arch}/{wrapper}"
            try:
                extra = {**arch_test_flags(arch), "dropout": 0.1, "attention_dropout": 0.1}
                # torch DDP broadcasts rank 0's parameters: start from different ones to see it;
                # fairseq's legacy DDP relies on the common seed, as fairseq-train does
                torch.manual_seed(10 + (rank if wrapper == "torch_ddp" else 0))
                model, args, _ = build_model(arch, extra, d=d)
                before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
                if wrapper == "torch_ddp":
                    wrapped = DistributedDataParallel(model, find_unused_parameters=False)
                else:
                    args.ddp_backend = "legacy_ddp"
                    wrapped = DistributedFairseqModel(args, model, dist.group.WORLD, torch.device("cpu"))
                opt = torch.optim.Adam(model.parameters(), lr=1e-2)
                torch.manual_seed(1000 + rank)  # different dropout masks per rank
                for step in range(3):
                    src, lengths, prev, tgt = batch(d, lengths=(7, 2, 5), seed=100 * rank + step)
                    opt.zero_grad()
                    loss = nll(wrapped, d, src, lengths, prev, tgt)
                    loss.backward()
                    if wrapper != "torch_ddp":
                        wrapped.all_reduce_grads()
                    opt.step()
                no_grad = [n for n, p in model.named_parameters() if p.grad is None]
                flat = torch.cat([p.detach().flatten() for p in model.parameters()])
                gathered = [torch.empty_like(flat) for _ in range(world)]
                dist.all_gather(gathered, flat)
                results[key] = {
                    "max_rank_diff": max(float((g - gathered[0]).abs().max()) for g in gathered),
                    "moved": float((flat - before).abs().max()),
                    "params_without_grad": no_grad,
                    "error": None,
                }
            except Exception:  # recorded for the test's message
                results[key] = {"error": traceback.format_exc()[-3000:]}
            dist.barrier()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()
