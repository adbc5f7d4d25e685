"""Faults: invalid flags, unsafe checkpoints, kill-and-resume, 2-process training.

Flag and checkpoint tests are fast; training runs are marked ``e2e``.
Everything loops over the registries (PIECES, transformer_attn archs).
"""

import argparse
import collections
import io
import json
import logging
import os
import re
import signal
import socket
import subprocess

import numpy as np
import pytest
import torch

from fairseq import checkpoint_utils
from fairseq.distributed import utils as distributed_utils
from fairseq_attn_core import PIECES, PieceConfigError
from fairseq_attn_plugins.checkpoint_safety import UnsafeCheckpointError

from cli_helpers import shared_data, train_in_process
from reliability_helpers import (
    bin_dir,
    build_model,
    ddp_worker,
    env,
    greedy_all_pieces,
    piece_test_flags,
    plain_args,
    plugin_archs,
    train_cmd,
)

ALLOWED_WORDS = re.compile(r"must be|allowed|expected|one of")


# ---------------------------------------------------------------------------
# invalid flags: one test per flag declared by any piece
# ---------------------------------------------------------------------------
def _piece_flags():
    """flag -> (dest, kind, [piece names that declare it])."""
    flags = {}
    for name, cls in sorted(PIECES.items()):
        parser = argparse.ArgumentParser(add_help=False)
        cls.add_args(parser)
        for a in parser._actions:
            if not a.option_strings:
                continue
            if a.nargs == 0:  # store_true/false: no invalid value exists
                continue
            kind = {int: "int", float: "float"}.get(a.type, "str")
            flag = a.option_strings[0]
            flags.setdefault(flag, (a.dest, kind, []))[2].append(name)
    return flags


PIECE_FLAGS = _piece_flags()
GENERIC_BAD = {"int": [-5], "float": [float("nan"), float("inf")], "str": ["nonsense!", "99"]}


def _bad_values(flag, dest, kind, pieces):
    for name in pieces:  # a piece may list its own: invalid_flags = {dest: [values]}
        own = getattr(PIECES[name], "invalid_flags", {}).get(dest)
        if own:
            return list(own)
    return GENERIC_BAD[kind]


def _expect_refusal(arch, extra, *needles):
    with pytest.raises(PieceConfigError) as info:
        build_model(arch, extra)
    msg = str(info.value)
    for n in needles:
        assert n in msg, f"message does not name {n!r}: {msg}"
    assert ALLOWED_WORDS.search(msg), f"message does not state the allowed values: {msg}"
    return msg


@pytest.mark.parametrize("flag", sorted(PIECE_FLAGS))
def test_invalid_piece_flag_fails_at_build(flag):
    dest, kind, pieces = PIECE_FLAGS[flag]
    for value in _bad_values(flag, dest, kind, pieces):
        refused_by = []
        for name in pieces:
            arch = f"transformer_{name}_wmt_en_de"
            extra = {**piece_test_flags(name), dest: value}
            try:
                build_model(arch, extra)
            except PieceConfigError as e:
                msg = str(e)
                assert flag in msg, f"{name}: {flag}={value!r} refused without naming the flag: {msg}"
                assert ALLOWED_WORDS.search(msg), f"{name}: message lacks the allowed values: {msg}"
                refused_by.append(name)
        assert refused_by, f"{flag}={value!r} was accepted by every piece that declares it ({pieces})"


def test_invalid_backend_fails_at_build():
    _expect_refusal("transformer_attn_wmt_en_de", {"attn_backend": "turbo"}, "--attn-backend", "turbo")


def test_unknown_piece_fails_at_build():
    _expect_refusal("transformer_attn_wmt_en_de", {"attn_pieces": "nosuchpiece"}, "--attn-pieces", "nosuchpiece")


@pytest.mark.parametrize("name", sorted(PIECES))
def test_piece_listed_twice_fails_at_build(name):
    with pytest.raises(PieceConfigError, match="--attn-pieces"):
        build_model("transformer_attn_wmt_en_de", {**piece_test_flags(name), "attn_pieces": f"{name},{name}"})


def _pairs():
    names = sorted(PIECES)
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]


@pytest.mark.parametrize("a,b", _pairs())
def test_piece_pair_builds_or_is_refused_clearly(a, b):
    """Every pair of pieces either builds and runs, or fails at build naming both."""
    ca, cb = PIECES[a], PIECES[b]
    extra = {**piece_test_flags(a), **piece_test_flags(b), "attn_pieces": f"{a},{b}"}
    declared = b in ca.conflicts or a in cb.conflicts
    if declared or (ca.expands_kv and cb.expands_kv):
        with pytest.raises(PieceConfigError) as info:
            build_model("transformer_attn_wmt_en_de", extra)
        msg = str(info.value)
        assert "--attn-pieces" in msg and a in msg and b in msg, msg
    else:
        model, _, _ = build_model("transformer_attn_wmt_en_de", extra)
        active = {p.name for m in model.modules() for p in getattr(m, "pieces", ())}
        assert {a, b} <= active, f"only {active} active with the test_flags of {a} and {b}"


def _explicit_only():
    """The pieces that need the explicit path with their test flags."""
    return sorted(n for n, c in PIECES.items()
                  if not c.fused_ok_with(plain_args(**piece_test_flags(n)))) or ["<none>"]


@pytest.mark.parametrize("name", _explicit_only())
def test_fused_backend_with_explicit_only_piece_fails_at_build(name):
    if name == "<none>":
        pytest.skip("every registered piece runs on the fused path")
    with pytest.raises(PieceConfigError) as info:
        build_model("transformer_attn_wmt_en_de", {**piece_test_flags(name), "attn_pieces": name, "attn_backend": "fused"})
    msg = str(info.value)
    assert "--attn-backend" in msg and name in msg and ("auto" in msg or "explicit" in msg), msg
    assert "\n" not in msg and msg.count(name) == 1, msg  # one line, the reason once


# ---------------------------------------------------------------------------
# checkpoint safety (torch >= 2.6, weights_only=True)
# ---------------------------------------------------------------------------
class ForeignObject:
    """A class no fairseq checkpoint contains."""

    def __init__(self):
        self.payload = 42


class Payload:
    """Unpickling this would create a file: proof that code ran."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _state(extra):
    return {"args": argparse.Namespace(arch="transformer_attn_wmt_en_de"), "model": collections.OrderedDict(),
            "extra_state": {"val_loss": np.float64(1.5), **extra}}


def test_torch_defaults_to_weights_only():
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    assert (major, minor) >= (2, 6), "these tests assume torch's weights_only=True default"


def test_only_fairseq_checkpoint_classes_are_allowlisted():
    from fairseq_attn_plugins.checkpoint_safety import fairseq_checkpoint_globals

    ours = set(fairseq_checkpoint_globals())
    extra = [g for g in torch.serialization.get_safe_globals()
             if g not in ours and not getattr(g, "__module__", "").startswith("torch")]
    assert extra == [], f"allowlisted beyond fairseq's checkpoint classes: {extra}"
    names = {f"{g.__module__}.{g.__qualname__}" for g in ours}
    assert "argparse.Namespace" in names
    assert not any(n.startswith(("os.", "subprocess.", "posix.")) for n in names), names
    # of the builtins only plain data types (omegaconf's metadata names them): making one runs no code
    plain = {"builtins." + t for t in ("dict", "list", "tuple", "int", "float", "str", "bool")}
    assert {n for n in names if n.startswith("builtins.")} <= plain, names


def test_fairseq_checkpoint_classes_load(tmp_path):
    from fairseq.logging import meters

    path = str(tmp_path / "ok.pt")
    meter = meters.AverageMeter()
    meter.update(2.0)
    torch.save(_state({"train_meters": collections.OrderedDict(loss=meter)}), path)
    state = torch.load(path)  # weights_only=True by default; fairseq_attn_plugins allowlisted these
    assert state["args"].arch == "transformer_attn_wmt_en_de"
    assert float(state["extra_state"]["val_loss"]) == 1.5
    assert state["extra_state"]["train_meters"]["loss"].avg == 2.0


def test_foreign_pickled_object_is_refused_with_clear_message(tmp_path):
    path = str(tmp_path / "foreign.pt")
    torch.save(_state({"thing": ForeignObject()}), path)
    with pytest.raises(UnsafeCheckpointError) as info:
        checkpoint_utils.load_checkpoint_to_cpu(path)
    msg = str(info.value)
    assert path in msg and "ForeignObject" in msg and "refusing" in msg, msg
    assert "weights_only=False" not in msg.replace("do not disable weights_only", ""), msg


def test_code_carrying_checkpoint_runs_no_code(tmp_path):
    marker = tmp_path / "pwned"
    path = str(tmp_path / "evil.pt")
    torch.save(_state({"thing": Payload(str(marker))}), path)
    with pytest.raises(UnsafeCheckpointError) as info:
        checkpoint_utils.load_checkpoint_to_cpu(path)
    assert not marker.exists(), "unpickling ran code from the checkpoint"
    assert path in str(info.value)


def _broken_files(tmp_path):
    """name -> path of files that are not loadable checkpoints, and the words expected."""
    good = tmp_path / "good.pt"
    torch.save(_state({}), str(good))
    data = good.read_bytes()
    files = {"empty": (b"", "empty"), "truncated": (data[: len(data) // 2], "corrupt or truncated"),
             "garbage": (b"this is not a checkpoint at all\n" * 3, "corrupt or truncated")}
    out = {}
    for name, (content, words) in files.items():
        path = tmp_path / f"{name}.pt"
        path.write_bytes(content)
        out[name] = (str(path), words)
    return out


@pytest.mark.parametrize("loader", ["fairseq", "safe_load"])
def test_broken_checkpoint_says_corrupt_or_empty_not_security(tmp_path, loader):
    """An empty or corrupt file names the file and what is wrong; only a
    foreign class talks about security."""
    from fairseq_attn_plugins.checkpoint_safety import CorruptCheckpointError, safe_load

    load = checkpoint_utils.load_checkpoint_to_cpu if loader == "fairseq" else safe_load
    for name, (path, words) in _broken_files(tmp_path).items():
        with pytest.raises(CorruptCheckpointError) as info:
            load(path)
        msg = str(info.value)
        assert path in msg and words in msg, (name, msg)
        assert not isinstance(info.value, UnsafeCheckpointError)
        for misleading in ("refusing", "arbitrary code", "weights_only", "allowlist"):
            assert misleading not in msg, (name, msg)


def test_safe_load_loads_refuses_and_names_missing_files(tmp_path):
    from fairseq_attn_plugins.checkpoint_safety import safe_load

    ok = str(tmp_path / "ok.pt")
    torch.save(_state({}), ok)
    assert safe_load(ok)["args"].arch == "transformer_attn_wmt_en_de"
    foreign = str(tmp_path / "foreign.pt")
    torch.save(_state({"thing": ForeignObject()}), foreign)
    with pytest.raises(UnsafeCheckpointError, match="ForeignObject"):
        safe_load(foreign)
    missing = str(tmp_path / "missing.pt")
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        safe_load(missing)


def test_safe_load_accepts_the_numpy_values_fairseq_keeps(tmp_path):
    """--eval-bleu keeps int64 BLEU-count arrays in the meters and a numpy best metric:
    such a checkpoint must resume; an object array (arbitrary pickles inside) stays refused."""
    from fairseq_attn_plugins.checkpoint_safety import safe_load

    extra = {"best": np.float64(27.3), "counts": np.array([5, 3, 2, 1], dtype=np.int64),
             "totals": np.arange(4, dtype=np.int32), "flag": np.bool_(True),
             "step": np.int64(7), "half": np.float16(0.5), "mat": np.ones((2, 3))}
    path = str(tmp_path / "numpy.pt")
    torch.save(_state(extra), path)
    got = safe_load(path)["extra_state"]
    for key, value in extra.items():
        assert type(got[key]) is type(value) and got[key].dtype == value.dtype, key
        np.testing.assert_array_equal(got[key], value)
    bad = str(tmp_path / "object_array.pt")
    torch.save(_state({"x": np.array([ForeignObject()], dtype=object)}), bad)
    with pytest.raises(UnsafeCheckpointError):
        safe_load(bad)


# ---------------------------------------------------------------------------
# e2e: kill mid-epoch and resume; 2-process distributed training
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def data_bin():
    return shared_data(300)  # the corpus of trained_models (its validation and test sets unused: no validation)


def _losses(text):
    """num_updates -> loss from fairseq's json train_inner lines (the logged text: 3 decimals)."""
    out = {}
    for line in text.splitlines():
        if "train_inner" in line and "{" in line:
            rec = json.loads(line[line.index("{"):])
            out[int(rec["num_updates"])] = rec["loss"]
    return out


# epochs of 15 updates on data_bin; an update-dependent learning rate (inverse_sqrt's warm-up)
RESUME_ARGS = ["--max-tokens", "200", "--max-update", "18", "--save-interval-updates", "4",
               "--keep-interval-updates", "1", "--no-epoch-checkpoints", "--seed", "7",
               "--dropout", "0.2", "--attention-dropout", "0.2", "--lr-scheduler", "inverse_sqrt",
               "--warmup-updates", "8", "--log-interval", "1", "--log-format", "json"]


def _train_here(cmd, caplog):
    """fairseq-train ``cmd`` by its main in this process; returns its log as the console prints
    it, one "logger | message" line per record (the json lines are logged by "train_inner")."""
    caplog.clear()
    caplog.set_level(logging.INFO)
    train_in_process(cmd[1:])
    return "\n".join(f"{r.name} | {r.getMessage()}" for r in caplog.records)


def _kill_after_checkpoint(cmd, epoch):
    """Run ``cmd``; SIGKILL it right after the first checkpoint saved in epoch ``epoch`` or later
    (fairseq logs "Saved checkpoint" once checkpoint_last.pt has been written too). Returns
    (output, returncode, the "Saved checkpoint" line)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(),
                         start_new_session=True)
    lines = []
    try:
        for line in p.stdout:
            lines.append(line)
            saved = re.search(r"Saved checkpoint .*\(epoch (\d+) @", line)
            if saved and int(saved.group(1)) >= epoch:
                os.killpg(p.pid, signal.SIGKILL)
                break
    finally:
        p.wait(timeout=300)
        p.stdout.close()
    return "".join(lines), p.returncode, lines[-1]


def _state_differences(ref, got, where=""):
    """The keys (a path) where two checkpoint states differ: tensors by torch.equal (0.0
    tolerance, dtype and shape included), anything else by ==."""
    if isinstance(ref, dict) and isinstance(got, dict):
        keys = sorted(set(ref) | set(got), key=str)
        return [d for k in keys for d in _state_differences(ref.get(k), got.get(k), f"{where}/{k}")]
    if isinstance(ref, (list, tuple)) and isinstance(got, (list, tuple)) and len(ref) == len(got):
        return [d for i, (a, b) in enumerate(zip(ref, got)) for d in _state_differences(a, b, f"{where}/{i}")]
    if torch.is_tensor(ref) or torch.is_tensor(got):
        same = torch.is_tensor(ref) and torch.is_tensor(got) and ref.dtype == got.dtype and torch.equal(ref, got)
        return [] if same else [where]
    return [] if ref == got else [where]


@pytest.mark.e2e
def test_kill_in_a_later_epoch_then_resume_is_bit_identical(data_bin, tmp_path, caplog):
    """A run killed right after a mid-epoch save in its second epoch and started again ends with
    the uninterrupted run's parameters, optimizer and scheduler state and iterator position,
    exactly (CPU; the pieces' random draws included: dropattn_c)."""
    arch = "transformer_csan2d_wmt_en_de" if "csan2d" in PIECES else "transformer_attn_wmt_en_de"
    flags = []
    for name in greedy_all_pieces():  # every compatible piece in one run, each active
        for k, v in piece_test_flags(name).items():
            flags += ["--" + k.replace("_", "-"), str(v)]
    pieces = ["--attn-pieces", ",".join(greedy_all_pieces())]
    # the uninterrupted reference and the resumed run: fairseq-train's main in this process
    # (fairseq seeds every update from --seed, so the process a run is in does not matter); only
    # the killed run is a process of its own
    ref_cmd = train_cmd(data_bin, str(tmp_path / "ref"), arch, RESUME_ARGS + flags + pieces)
    ref_losses = _losses(_train_here(ref_cmd, caplog))
    assert sorted(ref_losses) == list(range(1, 19)), sorted(ref_losses)

    cmd = train_cmd(data_bin, str(tmp_path / "run"), arch, RESUME_ARGS + flags + pieces)
    first, rc, saved_line = _kill_after_checkpoint(cmd, epoch=2)
    assert rc == -signal.SIGKILL, f"the run was not killed (rc={rc}):\n{first[-2000:]}"
    saved_at = int(re.search(r"epoch 2 @ (\d+) updates", saved_line).group(1))
    assert saved_at < 18, saved_line
    second = _train_here(cmd, caplog)
    assert f"@ {saved_at} updates" in second and "Loaded checkpoint" in second
    first_line = [l for l in second.splitlines() if "train_inner" in l][0]
    rec = json.loads(first_line[first_line.index("{"):])
    # fairseq's "update" is epoch - 1 + fraction of the epoch done: resumed inside epoch 2, after its start
    assert int(rec["num_updates"]) == saved_at + 1 and rec["epoch"] == 2 and 1 < float(rec["update"]) < 2, rec

    got = {**_losses(first), **_losses(second)}  # the resumed run overrides updates after the checkpoint
    assert got == ref_losses  # every update's logged loss, the first after the resume included
    ref_state, state = (checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / d / "checkpoint_last.pt"))
                        for d in ("ref", "run"))
    assert sorted(ref_state["model"]) == sorted(state["model"])
    assert _state_differences(ref_state["model"], state["model"]) == []  # every parameter, 0.0 tolerance
    assert _state_differences(ref_state["last_optimizer_state"], state["last_optimizer_state"]) == []
    assert ref_state["optimizer_history"][-1]["num_updates"] == state["optimizer_history"][-1]["num_updates"] == 18
    assert _state_differences(ref_state["optimizer_history"][-1]["lr_scheduler_state"],
                              state["optimizer_history"][-1]["lr_scheduler_state"]) == []
    assert ref_state["extra_state"]["train_iterator"] == state["extra_state"]["train_iterator"]
    # what every other rank of a resumed multi-process run receives from rank 0 (fairseq's
    # broadcast_object: the tensors split out, the rest through torch.save and torch.load, which
    # loads with weights_only=True): the same state
    tensors = []
    buffer = io.BytesIO()
    torch.save(distributed_utils._split_tensors_from_obj(ref_state, tensors), buffer)
    received = distributed_utils._put_tensors_in_obj(torch.load(io.BytesIO(buffer.getvalue()), map_location="cpu"),
                                                     tensors)
    assert received["cfg"] == ref_state["cfg"] and _state_differences(ref_state, received) == []


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.e2e
def test_every_arch_trains_with_ddp_on_two_cpu_processes(tmp_path):
    """torch DDP (find_unused_parameters=False: raises on unused parameters) and
    fairseq's legacy DDP, 2 gloo processes, different data per rank. The ranks are forks of this
    process (torch, fairseq and the plugin imported already: two interpreter starts less)."""
    archs = plugin_archs()
    torch.multiprocessing.start_processes(ddp_worker, args=(2, _free_port(), archs, str(tmp_path)), nprocs=2,
                                          join=True, start_method="fork")
    results = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    for key, res in results[0].items():
        assert res["error"] is None, f"{key}: {res['error']}\nrank 1: {results[1][key].get('error')}"
        assert res["params_without_grad"] == [], f"{key}: unused parameters {res['params_without_grad']}"
        assert res["moved"] > 0, f"{key}: parameters did not change"
        assert res["max_rank_diff"] == 0.0, f"{key}: parameters differ across ranks by {res['max_rank_diff']}"
    assert len(results[0]) == 2 * len(archs)


@pytest.mark.e2e
def test_fairseq_train_torchrun_two_cpu_processes(data_bin, tmp_path):
    """fairseq-train under torchrun with gloo, every compatible piece active at once.

    fairseq 0.12's pytorch_ddp backend passes CUDA device ids to DDP, so CPU
    runs use its legacy_ddp backend; fairseq checks after every step that the
    gradient norms agree across workers ("gradients are inconsistent")."""
    names = greedy_all_pieces()
    flags = ["--attn-pieces", ",".join(names)]
    for name in names:
        for k, v in piece_test_flags(name).items():
            flags += ["--" + k.replace("_", "-"), str(v)]
    cmd = train_cmd(data_bin, str(tmp_path / "ck"), "transformer_attn_wmt_en_de",
                    flags + ["--max-update", "4", "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp",
                             "--distributed-world-size", "2", "--distributed-init-method", "env://",
                             "--distributed-no-spawn", "--log-interval", "1", "--log-format", "json"])
    inner = " ".join(f"'{c}'" for c in cmd) + ' --distributed-rank "$RANK"'
    launcher = [os.path.join(bin_dir(), "torchrun"), "--nproc_per_node", "2", "--master_port", str(_free_port()),
                "--no-python", "/bin/sh", "-c", f"exec {inner}"]
    p = subprocess.run(launcher, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(),
                       timeout=400)
    assert p.returncode == 0, p.stdout[-4000:]
    assert "training on 2 devices" in p.stdout
    assert "initialized host" in p.stdout and "as rank 1" in p.stdout and "as rank 0" in p.stdout
    assert "inconsistent" not in p.stdout
    assert max(_losses(p.stdout)) == 4
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "ck" / "checkpoint_last.pt"))
    assert state["extra_state"]["train_iterator"]["epoch"] >= 1
    assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())
