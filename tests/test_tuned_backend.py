"""``--attn-backend tuned`` on CPU, among the CPU paths (fairseq_attn_core/backends/tuning.py):
every candidate of a call equals the explicit path (the tuning changes speed, not results);
a call's shape class is timed once, kept in the machine's cache file and the run's choices
file, read back by a fresh layer; a pinned run choice wins over the cache; a corrupt or
foreign cache file is ignored with a warning and rewritten; timing leaves the random generator
and the parameters' gradients as they were."""

import json

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, padded_batch
from fairseq_attn_core import PIECES as REGISTRY
from fairseq_attn_core import PieceConfigError
from fairseq_attn_core import backends
from fairseq_attn_core.backends import tuning

#: piece, its flags: the distance forms (bias by bucket, slopes, Shaw's key / both tables), a
#: hook piece (rope), a band (csan1d)
PIECES = [("t5bias", {}), ("alibi", {}), ("relpos", {"relpos_k": 3}), ("relpos", {"relpos_k": 3, "relpos_mode": "k"}),
          ("rope", {}), ("csan1d", {})]
LENGTHS = [9, 6]


@pytest.fixture
def files(tmp_path, monkeypatch):
    """The cache folder and the run's choices file, both under tmp_path."""
    monkeypatch.setenv(tuning.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(tuning.RUN_ENV, raising=False)
    return tmp_path


def future(T):
    return torch.zeros(T, T, dtype=torch.float64).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))


def run_layer(args, side, backend, train=True, dropout=0.0):
    attn = make_attention(args, side=side, backend=backend, dtype=torch.float64, dropout=dropout)
    attn.train(train)
    x, kpm = padded_batch(LENGTHS, dtype=torch.float64, left_pad=side == "encoder")
    x.requires_grad_(train)
    with torch.set_grad_enabled(train):
        y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False,
                    attn_mask=future(x.size(0)) if side == "decoder" else None)
    grads = {}
    if train:
        y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=y.dtype))
        grads = {"x": x.grad, **{n: p.grad for n, p in attn.named_parameters()}}
    return attn, y.detach(), grads


def the_class(attn, side, train=True, dropout=0.0):
    T = max(LENGTHS)
    call = backends.Call(tgt_len=T, src_len=T, attn_mask=side == "decoder", backward=train, dropout_p=dropout)
    return tuning.class_key(attn._layer, call, torch.float64, attn.num_heads, attn.head_dim), call


@pytest.mark.parametrize("piece,flags", PIECES, ids=[p + "".join(f"-{v}" for v in f.values()) for p, f in PIECES])
def test_every_candidate_equals_the_explicit_path(files, monkeypatch, piece, flags):
    """Each candidate, pinned through the run's choices file, runs the layer's call and equals
    the explicit path (its softmax is float32: 1e-5): output, input and every parameter
    gradient; training and inference calls of the encoder and the decoder (future mask)."""
    args = make_args(piece, **{**REGISTRY[piece].test_flags, **flags})
    run_file = files / "run.json"
    monkeypatch.setenv(tuning.RUN_ENV, str(run_file))
    sides = [s for s in ("encoder", "decoder") if make_attention(args, side=s).pieces]
    seen = set()
    for side in sides:
        for train in (True, False):
            _, ref, ref_grads = run_layer(args, side, "explicit", train)
            probe = make_attention(args, side=side, backend="tuned")
            cls, call = the_class(probe, side, train)
            names = [p.name for p in tuning.candidates(probe._layer, call)]
            assert names[-1] == "explicit" and len(names) >= 2, names
            for name in names:
                tuning.write_choices(run_file, {cls: name})
                attn, out, grads = run_layer(args, side, "tuned", train)
                assert attn.last_run[0] == name and attn.tuned_choices == {cls: (name, "run")}
                assert_close(out, ref, rtol=1e-5, atol=1e-5, msg=lambda m: f"{side} {name}: {m}")
                assert set(grads) == set(ref_grads)
                for n in grads:
                    assert_close(grads[n], ref_grads[n], rtol=1e-5, atol=1e-5, msg=lambda m: f"{side} {name} {n}: {m}")
                seen.add(name)
    if piece in ("t5bias", "alibi", "relpos"):  # the distance kernels' own CPU paths are among them
        assert seen & {"distance bias", "region split", "query blocks"}, seen


def test_a_class_is_timed_once_then_read_from_the_cache(files, monkeypatch, caplog):
    args = make_args("t5bias")
    run_file = files / "run.json"
    monkeypatch.setenv(tuning.RUN_ENV, str(run_file))
    torch.manual_seed(7)
    attn, out, _ = run_layer(args, "encoder", "tuned", dropout=0.1)
    state_after_timing = torch.get_rng_state()
    cls, call = the_class(attn, "encoder", dropout=0.1)
    assert cls == "cpu|float64|t5bias buckets h4d4|train dropout|L16", cls
    name, source = attn.tuned_choices[cls]
    assert source == "timed"
    key = tuning.machine_key(torch.device("cpu"))
    cache = tuning.cache_file(key)
    data = json.loads(cache.read_text())
    candidates = {p.name for p in tuning.candidates(attn._layer, call)}
    assert data["key"] == key and data["choices"] == {cls: name} and set(data["times_ms"][cls]) == candidates
    assert name == min(data["times_ms"][cls], key=data["times_ms"][cls].get)
    assert tuning.read_choices(run_file) == {cls: name}  # the run's file: what the record keeps
    # a fresh layer (another run on this machine): the cache's choice, no timing; the training
    # draws the same random numbers as the timed one did (dropout)
    monkeypatch.delenv(tuning.RUN_ENV)
    torch.manual_seed(7)
    again, out_again, _ = run_layer(args, "encoder", "tuned", dropout=0.1)
    assert again.tuned_choices == {cls: (name, "cache")}
    assert torch.equal(torch.get_rng_state(), state_after_timing) and torch.equal(out_again, out)
    # damaged (cut short outside this package): refused in one line naming it, neither timed again nor
    # overwritten; removed, it is made again
    damaged = cache.read_text()[:40]
    cache.write_text(damaged)
    with pytest.raises(PieceConfigError) as refused:
        run_layer(args, "encoder", "tuned", dropout=0.1)
    assert str(refused.value).startswith(f"{cache}: not a tuned-paths file of format {tuning.FORMAT}")
    assert "\n" not in str(refused.value) and "remove it" in str(refused.value) and cache.read_text() == damaged
    cache.unlink()
    third, _, _ = run_layer(args, "encoder", "tuned", dropout=0.1)
    assert third.tuned_choices[cls][1] == "timed"
    assert tuning.read_choices(cache, key) == {cls: third.tuned_choices[cls][0]}
    # made for another machine: ignored, never trusted
    caplog.clear()
    data = json.loads(cache.read_text())
    tuning.write_choices(cache, {cls: "explicit" if name != "explicit" else "fused"}, dict(key, device="another"))
    with caplog.at_level("WARNING", logger=tuning.__name__):
        fourth, _, _ = run_layer(args, "encoder", "tuned", dropout=0.1)
    assert fourth.tuned_choices[cls][1] == "timed" and any("not this machine" in r.getMessage() for r in caplog.records)


def test_the_run_s_choice_wins_over_the_cache(files, monkeypatch):
    """A resumed run keeps the path it trained with, whatever this machine's cache says."""
    args = make_args("t5bias")
    probe = make_attention(args, backend="tuned")
    cls, _ = the_class(probe, "encoder")
    key = tuning.machine_key(torch.device("cpu"))
    tuning.write_choices(tuning.cache_file(key), {cls: "fused"}, key)
    attn, _, _ = run_layer(args, "encoder", "tuned")
    assert attn.tuned_choices == {cls: ("fused", "cache")}
    monkeypatch.setenv(tuning.RUN_ENV, str(files / "run.json"))
    tuning.write_choices(files / "run.json", {cls: "explicit"})
    attn, _, _ = run_layer(args, "encoder", "tuned")
    assert attn.tuned_choices == {cls: ("explicit", "run")} and attn.last_run[0] == "explicit"


def test_bench_tune_fills_the_cache_a_training_then_reads(files, capsys):
    """``fairseq-attn-bench --tune`` times every class a model meets at the given lengths; a
    model built afterwards finds each of its classes in the cache (no timing)."""
    from fairseq_attn_core import SelfAttention
    from fairseq_attn_plugins.bench import PRESETS, build_model, make_dictionary
    from fairseq_attn_plugins.cli.bench import main

    assert main(["--tune", "--systems", "t5bias", "--lengths", "16", "--json", str(files / "tune.json")]) == 0
    report = json.loads((files / "tune.json").read_text())
    classes = report["t5bias"]
    kinds = {c.split("|")[3] for c in classes}
    assert kinds == {"train", "train causal", "infer", "infer causal"}, classes
    assert {v["source"] for v in classes.values()} == {"timed"}
    key = tuning.machine_key(torch.device("cpu"))
    assert tuning.read_choices(tuning.cache_file(key), key) == {c: v["path"] for c, v in classes.items()}
    d = make_dictionary(PRESETS["tiny"]["vocab"])
    model = build_model("transformer_t5bias_wmt_en_de", d, PRESETS["tiny"]["sizes"], 2, attn_backend="tuned")
    src = torch.randint(d.nspecial, len(d), (3, 16))
    model(src, torch.full((3,), 16), src)[0].sum().backward()
    seen = {c: v for m in model.modules() if isinstance(m, SelfAttention) for c, v in m.tuned_choices.items()}
    assert seen and all(v == (classes[c]["path"], "cache") for c, v in seen.items()), seen
    with pytest.raises(SystemExit, match="--tune fills the tuned paths' cache; drop --sweep"):
        main(["--tune", "--sweep", "lengths"])


def test_the_run_record_keeps_the_choices(tmp_path):
    """The recipes' training: before it, the run's choices file holds the record's choices (and,
    for a run resumed from its checkpoints, what the file held beyond them; a new run none);
    after it, the record holds every choice the file got."""
    from fairseq_attn_recipes import recording

    side = tmp_path / recording.TUNED_PATHS
    tuning.write_choices(side, {"b": "explicit"})
    rec = {"tuned_paths": {"a": "fused"}}
    recording.keep_tuned_paths(str(tmp_path), rec, continued=True)
    assert tuning.read_choices(side) == {"a": "fused", "b": "explicit"} == rec["tuned_paths"]
    tuning.write_choices(side, {"a": "distance bias", "c": "fused"})  # a layer added "c"
    recording.record_tuned_paths(str(tmp_path), rec)
    assert rec["tuned_paths"] == {"a": "fused", "b": "explicit", "c": "fused"}  # the record's own stay
    fresh = {}
    recording.keep_tuned_paths(str(tmp_path), fresh, continued=False)  # a new run in the folder
    assert tuning.read_choices(side) == {} and "tuned_paths" not in fresh


def _add_classes(path, key, first, n, start):
    """One process's choices: ``n`` shape classes from ``first``, each added as a tuned layer adds it."""
    from pathlib import Path
    start.wait()
    for i in range(first, first + n):
        tuning.add_choice(Path(path), f"class {i}", "explicit", key, {"explicit": float(i)})


def test_processes_adding_choices_at_once_lose_none_and_never_show_a_half_written_file(tmp_path):
    """Two processes (the ranks of one training) add 60 shape classes each to one cache file at the same
    time, while this one reads it: every class of both is there after, with its time, and every read
    found a whole file."""
    import multiprocessing

    key = tuning.machine_key(torch.device("cpu"))
    path = tmp_path / "cache" / "tuned_paths.json"
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_add_classes, args=(str(path), key, first, 60, start)) for first in (0, 1000)]
    for p in procs:
        p.start()
    start.set()
    reads = 0
    while any(p.is_alive() for p in procs):
        tuning.read_choices(path, key)  # a damaged file would be refused here
        reads += 1
    for p in procs:
        p.join()
        assert p.exitcode == 0
    want = {f"class {i}": "explicit" for i in list(range(60)) + list(range(1000, 1060))}
    assert tuning.read_choices(path, key) == want and reads > 0
    times = json.loads(path.read_text())["times_ms"]
    assert times == {c: {"explicit": float(c.split()[1])} for c in want}
