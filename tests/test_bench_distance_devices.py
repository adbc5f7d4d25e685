"""``--distance-devices``: the benchmark builds layers with the given ``Policy.distance_devices``,
runs several policies in the same rounds, and records the paths each system's layers took;
every report names the code it measured (commit, sources hash)."""

import json

import pytest

from fairseq_attn_plugins.bench import run_benchmark
from fairseq_attn_plugins.bench.report import provenance, sources_hash
from fairseq_attn_plugins.bench.systems import apply_distance_devices
from fairseq_attn_plugins.cli import bench as cli


@pytest.fixture(scope="module")
def two_policies():
    """t5bias's auto at L = 128 (the CPU distance-bias path from 128 positions) and rope's fused
    path, under a policy without cpu (first) and one with it."""
    return run_benchmark("cpu", "tiny", "fp32", systems=["t5bias/auto", "rope/fused"], repeats=2,
                         log=lambda *a: None, sweep="lengths", lengths=[128],
                         distance_devices=[("cuda",), ("cpu",)])


def test_each_policy_builds_its_own_layers_and_records_their_paths(two_policies):
    entries = {e["name"]: e for e in two_policies["systems"]}
    assert entries["t5bias/auto"]["distance_devices"] == ["cuda"]
    assert entries["t5bias/auto@cpu"]["distance_devices"] == ["cpu"]
    # tiny: 3 encoder layers; without cpu in the policy auto takes SDPA, with it the distance bias
    assert entries["t5bias/auto"]["paths_by_shape"] == {"128": {"encoder": {"fused": 3}}}
    assert entries["t5bias/auto@cpu"]["paths_by_shape"] == {"128": {"encoder": {"distance bias": 3}}}
    measured = two_policies["sweep"]["lengths"]["128"]["systems"]
    assert measured["t5bias/auto"]["paths"] == {"fused": 3}
    assert measured["t5bias/auto@cpu"]["paths"] == {"distance bias": 3}
    assert two_policies["meta"]["distance_devices"] == [["cuda"], ["cpu"]]


def test_a_policy_that_changes_no_path_is_measured_once(two_policies):
    entries = {e["name"]: e for e in two_policies["systems"]}
    assert entries["rope/fused@cpu"]["same_paths_as"] == "rope/fused"
    measured = two_policies["sweep"]["lengths"]["128"]["systems"]
    assert set(measured) == {"fairseq", "rope/fused", "t5bias/auto", "t5bias/auto@cpu"}


def test_one_policy_keeps_the_names_and_the_default_is_left_alone():
    kw = dict(systems=["t5bias/auto"], repeats=2, log=lambda *a: None, sweep="lengths", lengths=[128])
    default = run_benchmark("cpu", "tiny", "fp32", **kw)
    off = run_benchmark("cpu", "tiny", "fp32", distance_devices=[("cuda",)], **kw)
    assert default["sweep"]["lengths"]["128"]["systems"]["t5bias/auto"]["paths"] == {"distance bias": 3}
    assert off["sweep"]["lengths"]["128"]["systems"]["t5bias/auto"]["paths"] == {"fused": 3}
    assert "distance_devices" not in {e["name"]: e for e in default["systems"]}["t5bias/auto"]
    assert default["meta"]["distance_devices"] == "the layers' default policy"


def test_training_records_the_paths_at_every_batch_shape(tmp_path):
    out = tmp_path / "train.json"
    assert cli.main(["--preset", "tiny", "--threads", "1", "--systems", "t5bias", "--no-infer",
                     "--distance-devices", "cpu", "--distance-devices", "cpu,cuda",
                     "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    entries = {e["name"]: e for e in report["systems"]}
    shapes = entries["t5bias"]["paths_by_shape"]
    assert shapes and all("x" in key for key in shapes)  # source x target lengths of the batches
    for sides in shapes.values():  # tiny: 3 + 3 layers, short batches: SDPA on both sides
        assert sides == {"encoder": {"fused": 3}, "decoder": {"fused": 3}}
    # cuda added to the policy changes nothing on CPU: measured once
    assert entries["t5bias@cpu+cuda"]["same_paths_as"] == "t5bias"
    assert set(report["train"]["systems"]) == {"fairseq", "t5bias"}
    assert report["meta"]["sources_sha256"] == sources_hash()


def test_the_devices_given_are_every_device_the_distance_kernels_run_on():
    """``--distance-devices cpu``: none on CUDA (auto before its CUDA measurement, which takes
    t5bias's training calls there by default); ``cpu,cuda``: every call on both."""
    from attn_helpers import make_args, make_attention, path_name

    train = dict(tgt_len=512, src_len=512, on_cuda=True, backward=True)
    paths = {}
    for devices in (None, ("cpu",), ("cpu", "cuda")):
        attn = make_attention(make_args("t5bias"))
        apply_distance_devices(attn, devices)
        paths[devices] = (path_name(attn, **train), path_name(attn, **{**train, "backward": False}),
                          path_name(attn, **{**train, "on_cuda": False}))
    assert paths[None] == ("distance bias", "fused", "distance bias")
    assert paths[("cpu",)] == ("fused", "fused", "distance bias")
    assert paths[("cpu", "cuda")] == ("distance bias", "distance bias", "distance bias")


@pytest.mark.parametrize("value", ["gpu", "cpu,cpu", "", "cuda,tpu"])
def test_bad_distance_devices_refused(value, capsys):
    with pytest.raises(SystemExit):
        cli.main(["--distance-devices", value])
    assert "--distance-devices" in capsys.readouterr().err


def test_distance_devices_refused_where_nothing_is_built_with_it(tmp_path):
    out = tmp_path / "n.json"
    with pytest.raises(SystemExit, match="--distance-devices belongs to"):
        cli.main(["--mode", "numerics", "--distance-devices", "cuda", "--json", str(out)])
    assert not out.exists()


def test_sources_hash_names_the_code_and_needs_no_git(tmp_path):
    pkg = tmp_path / "fairseq_attn_core"
    pkg.mkdir()
    (pkg / "a.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("outside the source folders")
    first = sources_hash(str(tmp_path))
    (tmp_path / "notes.txt").write_text("changed, not a source")
    assert sources_hash(str(tmp_path)) == first
    (pkg / "a.py").write_text("x = 2\n")
    assert sources_hash(str(tmp_path)) != first
    info = provenance(str(tmp_path))  # a folder outside any git repository
    assert info["commit"] is None and info["sources_sha256"] == sources_hash(str(tmp_path))
