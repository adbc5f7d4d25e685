"""The benchmark driver: build every system, then train / infer / sweep interleaved."""

import gc
import os

import torch

from .infer import bench_infer
from .data import load_data_bin, make_train_batches
from .report import meta, provenance, verdicts
from .sweep import bench_sweep
from .systems import (DTYPES, PRESETS, STOCK, apply_distance_devices, attention_paths, build_model,
                      discover_systems, layer_paths, make_dictionary, position_sweep_systems,
                      scaling_sizes, with_distance_devices)
from .train import bench_scaling, bench_train

#: lengths of ``--sweep lengths``
SWEEP_LENGTHS = (32, 64, 128, 256, 512, 1024)


def run_benchmark(device="cpu", preset=None, dtype=None, mode="train", systems=None,
                  repeats=None, seed=1, infer=True, log=print, sweep=None, lengths=None,
                  distance_devices=None, data_bin=None) -> dict:
    """``data_bin``: a fairseq-preprocess folder whose dictionaries the models are built with and
    whose training pairs' lengths the batches take (else the preset's vocabularies, WMT-like lengths).

    ``sweep="lengths"``: the position-method length sweep (mode sweep, each position
    method on each training path of the device, ``lengths`` or 32 ... 1024).

    ``distance_devices``: a list of device lists (e.g. ``[("cpu",), ("cpu", "cuda")]``), each
    the devices on which every layer takes the distance kernels for every call
    (:func:`.systems.apply_distance_devices`). One: every layer is built with it. Several: each system runs under
    each, in the same interleaved rounds (the first keeps its name, the others are
    ``name@cpu+cuda``); a system whose layers take the same paths under a later policy at
    every measured shape as under the first is not measured twice (``same_paths_as``).
    Every system records the paths its layers take at each measured shape."""
    device = torch.device(device)
    preset = preset or ("small" if device.type == "cpu" else "base")
    dtype = dtype or ("fp32" if device.type == "cpu" else "fp16")
    cfg = dict(PRESETS[preset])
    if repeats:
        cfg["repeats"] = repeats
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    report = {"meta": meta(device, preset, dtype, mode, cfg)}
    report["meta"].update(provenance())
    report["meta"]["distance_devices"] = ([list(d) for d in distance_devices] if distance_devices
                                          else "the layers' default policy")
    if mode == "scaling":
        report["scaling"] = run_scaling(cfg, device, dtype, seed, log)
        return report
    if sweep == "lengths":
        mode = report["meta"]["mode"] = "sweep"
        cfg["sweep_lengths"] = tuple(lengths or SWEEP_LENGTHS)
        report["meta"]["config"]["sweep_lengths"] = list(cfg["sweep_lengths"])
        sys_list = position_sweep_systems(systems, device.type)
    else:
        sys_list = discover_systems(cfg.get("big", False), systems)
    sys_list = with_distance_devices(sys_list, distance_devices)
    dictionary, tgt_dictionary, pair_lengths, data = corpus(cfg, data_bin)
    report["meta"]["data"] = data
    longest = cfg["max_src"] if pair_lengths is None else int(max(max(x) for x in pair_lengths))
    sweep_shapes = [(L, None) for L in cfg["sweep_lengths"]]
    sweep_positions = max(256, max(cfg["sweep_lengths"]))
    positions = max(256, longest + 1) if mode != "sweep" else sweep_positions
    models, entries = _build_all(sys_list, (dictionary, tgt_dictionary), cfg, seed, device, dtype,
                                 positions, log,
                                 sweep_shapes if mode == "sweep" else
                                 train_shapes(dictionary, cfg, seed, tgt_dictionary, pair_lengths))
    report["systems"] = entries
    log(f"systems: {', '.join(models)} | preset {preset}, {dtype} on {device}")
    if mode in ("train", "all"):
        report["train"] = bench_train(models, dictionary, cfg, device, seed, log, tgt_dictionary, pair_lengths)
        if infer:
            report["infer"] = bench_infer(models, dictionary, cfg, device, seed, log, tgt_dictionary, pair_lengths)
    # mode all: the sweep rebuilds the systems with position tables long enough for its lengths;
    # where that is the same build (same positions, no system dropped for taking another's paths
    # at the training shapes), it measures the models built for training instead
    reuse = positions == sweep_positions and all(s.same_model_as is None for s in sys_list)
    if mode == "all" and reuse:
        sweep_entries = entries
        log("sweep: the models built for training (the same positions)")
    elif mode == "all":
        del models
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        models, sweep_entries = _build_all(sys_list, (dictionary, tgt_dictionary), cfg, seed, device, dtype,
                                           sweep_positions, log, sweep_shapes)
    if mode in ("sweep", "all"):
        report["sweep"] = bench_sweep(models, cfg, device, seed, log)
        if mode == "all":
            report["sweep"]["models"] = "built for training" if reuse else f"rebuilt, {sweep_positions} positions"
            report["sweep"]["build_errors"] = {e["name"]: e["error"] for e in sweep_entries
                                               if "error" in e}
    targets = {s["name"]: s["target"] for s in report["systems"]}
    report["verdicts"] = verdicts(report, targets)
    return report


def corpus(cfg: dict, data_bin=None):
    """(source dictionary, target dictionary, real pairs' lengths or None, what the report says of them):
    a data-bin's (:func:`.data.load_data_bin`), or the preset's vocabularies (``vocab``, and ``tgt_vocab``
    where the target has its own) and WMT-like lengths."""
    if data_bin:
        src, tgt, lengths, pair = load_data_bin(data_bin)
        if src != tgt and cfg.get("model", {}).get("share_all_embeddings", True):
            raise ValueError(f"--data-bin {data_bin}: a dictionary per language, but this preset shares all "
                             f"embeddings (one joined dictionary); --preset bible shares the decoder's only")
        where = {"data_bin": os.path.abspath(data_bin), "pair": pair, "lengths": f"{len(lengths[0])} train pairs"}
    else:
        src = make_dictionary(cfg["vocab"])
        tgt = make_dictionary(cfg["tgt_vocab"]) if cfg.get("tgt_vocab") else src
        lengths, where = None, {"data_bin": None, "lengths": f"WMT-like, below {cfg['max_src']} tokens"}
    return src, tgt, lengths, dict(where, vocab={"source": len(src), "target": len(tgt)})


def train_shapes(dictionary, cfg, seed, tgt_dictionary=None, lengths=None):
    """(source, target) lengths of the training batches (the batches of :func:`.train.bench_train`)."""
    batches = make_train_batches(dictionary, cfg["max_tokens"], cfg["n_batches"], cfg["max_src"], seed, "cpu",
                                 tgt_dictionary, lengths)
    return sorted({(b["net_input"]["src_tokens"].shape[1], b["net_input"]["prev_output_tokens"].shape[1])
                   for b in batches})


def shape_paths(model, shapes) -> dict:
    """Shape -> side -> path name -> number of self-attention layers taking it in training:
    ``"S"`` (the encoder alone at S positions, as the sweep runs it) or ``"SxT"`` (encoder at S,
    decoder at T)."""
    out = {}
    for S, T in shapes:
        key = str(S) if T is None else f"{S}x{T}"
        out[key] = {"encoder": layer_paths(model.encoder, S)}
        if T is not None:
            out[key]["decoder"] = layer_paths(model.decoder, T)
    return out


def _build_all(sys_list, dictionaries, cfg, seed, device, dtype, max_positions, log, shapes=()):
    """Build every system (``dictionaries``: source, target) (a broken variant is reported, the others still run); a system
    under a later distance policy whose layers take the same paths at every shape in
    ``shapes`` as under the first is dropped (``same_paths_as``)."""
    models, entries = {}, []
    for s in sys_list:
        entry = {"name": s.name, "arch": s.arch, "target": s.target}
        if s.distance_devices is not None:
            entry["distance_devices"] = list(s.distance_devices)
        try:
            m = build_model(s.arch, dictionaries[0], cfg["sizes"], seed, dictionaries[1],
                            max_source_positions=max_positions, max_target_positions=max_positions,
                            **{**cfg.get("model", {}), **s.flags})
            apply_distance_devices(m, s.distance_devices)
            m = m.to(device=device, dtype=DTYPES[dtype])
            entry["params"] = sum(p.numel() for p in m.parameters())
            entry["param_tensors"] = sum(1 for _ in m.parameters())
            entry["attention_paths"] = attention_paths(m)
            entry["paths_by_shape"] = shape_paths(m, shapes)
            first = next((e for e in entries if e["name"] == s.same_model_as), None)
            if first is not None and first.get("paths_by_shape") == entry["paths_by_shape"]:
                entry["same_paths_as"] = s.same_model_as
                log(f"{s.name}: the same paths as {s.same_model_as} at every shape, not measured twice")
                del m
            else:
                models[s.name] = m
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
            log(f"! {s.name}: cannot build (max positions {max_positions}): {entry['error']}")
        entries.append(entry)
    if STOCK not in models:
        raise RuntimeError(f"stock fairseq model failed to build: {entries[0].get('error')}")
    return models, entries




def run_scaling(cfg, device, dtype, seed, log) -> dict:
    """Stock fairseq base vs big on the same batches (see :func:`.train.bench_scaling`)."""
    dictionary = make_dictionary(cfg["vocab"])
    sizes = scaling_sizes(cfg)
    models = {}
    for name in ("base", "big"):
        m = build_model("transformer_wmt_en_de", dictionary, sizes[name], seed,
                        max_source_positions=max(256, cfg["max_src"] + 1))
        models[name] = m.to(device=device, dtype=DTYPES[dtype])
    out = bench_scaling(models, sizes, dictionary, cfg, device, seed, log)
    out["sizes"] = sizes
    return out
