"""A checkpoint's state read without torch (fairseq_attn_records.checkpoint_config): the state
torch reads, each tensor left out; None for anything else, where the reports read it with torch."""

import argparse
import collections
import os
import subprocess
import sys

import torch

from fairseq_attn_plugins.checkpoint_identity import identity_of_checkpoint, mapped_state
from fairseq_attn_records import checkpoint_config, run_record
from fairseq_attn_reports import runs

CKPT = os.path.join(os.path.dirname(__file__), "data", "relpos_checkpoint", "checkpoint.pt")


def tensors_left_out(obj):
    """``obj`` as torch read it, each tensor replaced by the reader's placeholder (plain recursion)."""
    if isinstance(obj, torch.Tensor):
        return checkpoint_config.TENSOR
    if isinstance(obj, dict):
        return type(obj)((k, tensors_left_out(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(tensors_left_out(v) for v in obj)
    if isinstance(obj, argparse.Namespace):
        return argparse.Namespace(**{k: tensors_left_out(v) for k, v in vars(obj).items()})
    return obj


def test_the_state_torch_reads_without_its_tensors(tmp_path):
    for path in (CKPT, tmp_path / "saved.pt"):
        if path != CKPT:  # a state holding every class the reader builds, saved by torch itself
            torch.save({"cfg": {"model": argparse.Namespace(arch="a", lr=[0.1])}, "w": torch.ones(3),
                        "model": collections.OrderedDict(x=torch.zeros(2, dtype=torch.int64)),
                        "extra_state": {"train_iterator": {"epoch": 2}}}, path)
        got = checkpoint_config.state_without_tensors(str(path))
        want = tensors_left_out(mapped_state(str(path)))
        assert got == want and type(got["model"]) is type(want["model"])
        assert run_record.identity_of_cfg(got["cfg"]) == identity_of_checkpoint(str(path))
        assert runs._identity_of_checkpoint(str(path)) == identity_of_checkpoint(str(path))


def test_other_classes_or_files_are_left_to_torch(tmp_path):
    cases = {"set.pt": {"cfg": {"model": {"arch": "a"}}, "seen": {1, 2}},
             "defaultdict.pt": {"cfg": collections.defaultdict(list, model={"arch": "a"})}}
    for name, state in cases.items():
        torch.save(state, tmp_path / name)
        assert checkpoint_config.state_without_tensors(str(tmp_path / name)) is None
    (tmp_path / "broken.pt").write_bytes(b"not a checkpoint")
    legacy = tmp_path / "legacy.pt"
    torch.save({"cfg": {}}, legacy, _use_new_zipfile_serialization=False)
    for path in (tmp_path / "broken.pt", legacy, tmp_path / "missing.pt"):
        assert checkpoint_config.state_without_tensors(str(path)) is None
    # the reports then read it with torch: its one-line error
    try:
        runs._identity_of_checkpoint(str(tmp_path / "broken.pt"))
        raise AssertionError("a broken checkpoint was read")
    except run_record.RecordError as e:
        assert "is corrupt or truncated" in str(e)


def test_read_without_importing_torch_or_fairseq():
    code = ("import sys; from fairseq_attn_records import checkpoint_config, run_record\n"
            f"s = checkpoint_config.state_without_tensors({CKPT!r})\n"
            "print(run_record.identity_of_cfg(s['cfg'])['arch'], 'torch' in sys.modules, 'fairseq' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.split() == [identity_of_checkpoint(CKPT)["arch"], "False", "False"], p.stderr
