"""benchmarks/diagnostics/position_params.py on a tiny t5bias model trained here by
fairseq-train (optimizer state saved, two checkpoints): its tables, bucket counts, logit
scales, gradients and Adam steps against plain float64 computations of the test."""

import copy
import importlib.util
import json
import math
import os
import statistics
import sys

import pytest
import torch
from torch.testing import assert_close

sys.path.insert(0, os.path.dirname(__file__))
from cli_helpers import PLUGIN_DIR, TINY, TRAIN, shared_data, train_in_process  # noqa: E402
from shared_builds import build_once  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "diagnostics", "position_params.py")
N_BATCHES = 2


def _module():
    spec = importlib.util.spec_from_file_location("position_params", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


diag = _module()


def _run_dir():
    data = shared_data(300)

    def make(save):
        # no --no-epoch-checkpoints: checkpoint1.pt, checkpoint2.pt, _last (with Adam's moments)
        train = [a for a in TRAIN if a != "--no-epoch-checkpoints"]
        train_in_process([data, "--user-dir", PLUGIN_DIR, "--arch", "transformer_t5bias_wmt_en_de",
                          *TINY, *train, "--lr", "3e-3", "--max-epoch", "2", "--save-dir", save,
                          "--disable-validation", "--share-all-embeddings", "--dropout", "0.1"])
    return build_once("position_params_t5bias_2epochs", make)


@pytest.fixture(scope="module")
def run():
    run_dir = _run_dir()
    report = diag.diagnose(run_dir, n_batches=N_BATCHES, splits=("test",))
    from fairseq_attn_plugins.checkpoint_safety import safe_load
    from fairseq_attn_plugins.loading import load_model_ensemble_and_task

    path = os.path.join(run_dir, "checkpoint_last.pt")
    models, cfg, task = load_model_ensemble_and_task([path])
    batches = diag.training_batches(task, cfg, N_BATCHES)
    return run_dir, report, safe_load(path), models[0], cfg, task, batches


def _std(values):
    return statistics.pstdev(values) if values else None


def test_tables_and_their_change_equal_plain_loops(run):
    run_dir, report, state, *_ = run
    assert [r["checkpoint"] for r in report["over_training"]] == \
        ["checkpoint1.pt", "checkpoint2.pt", "checkpoint_last.pt"]
    first = diag.checkpoint_files(run_dir)[0]
    from fairseq_attn_plugins.checkpoint_safety import safe_load
    start = safe_load(first)["model"]
    keys = [k for k in state["model"] if k.endswith("bucket_bias")]
    assert sorted(report["tables"]) == sorted(keys) and len(keys) == 2  # one table per stack
    for key in keys:
        t = state["model"][key].double().tolist()
        rows, cols = len(t), len(t[0])
        got = report["tables"][key]
        norms = [math.sqrt(sum(t[r][c] ** 2 for r in range(rows))) for c in range(cols)]
        assert_close(torch.tensor(got["col_norm"], dtype=torch.float64), torch.tensor(norms, dtype=torch.float64))
        for r in range(rows):
            assert got["row_min"][r] == min(t[r]) and got["row_max"][r] == max(t[r])
            assert_close(got["row_std"][r], statistics.pstdev(t[r]))
        s = start[key].double().tolist()
        change = [max(abs(t[r][c] - s[r][c]) for c in range(cols)) for r in range(rows)]
        last = report["over_training"][-1]["tables"][key]
        assert_close(torch.tensor(last["max_row_change"], dtype=torch.float64), torch.tensor(change, dtype=torch.float64))
        rms = math.sqrt(sum(x * x for row in t for x in row) / (rows * cols))
        assert_close(last["rms"], rms)


def test_bucket_pairs_count_every_training_pair_and_unreached_buckets_never_move(run):
    _, report, state, model, _, task, _ = run
    ds = task.dataset("train")
    for side, lengths, causal in (("encoder", ds.src_sizes, False), ("decoder", ds.tgt_sizes, True)):
        piece = getattr(model, side).layers[0].self_attn.pieces[0]
        bucket = _buckets(piece)
        counts = [0] * piece.num_buckets
        for n in lengths.tolist():
            for i in range(n):
                for j in range(n):
                    if causal and j > i:
                        continue
                    counts[bucket[j - i]] += 1
        got = report["bucket_pairs"][f"{side}.0"]
        assert got == counts
        change = report["over_training"][-1]["tables"][f"{side}.layers.0.self_attn.pieces.0.bucket_bias"]
        # training moves exactly the buckets its sentences reach
        assert 0 in counts and [c > 0 for c in counts] == [d > 0 for d in change["max_row_change"]]


def _buckets(piece, longest=200):
    """distance -> the piece's bucket (T5's mapping, tested against Hugging Face's elsewhere)."""
    return {d: int(piece.bucket(torch.tensor([d]))[0]) for d in range(-longest, longest + 1)}


def test_share_of_an_evaluation_split_in_unreached_buckets_equals_a_plain_count(run):
    _, report, _, model, _, task, _ = run
    task.load_dataset("test", combine=False, epoch=1)
    train, test = task.dataset("train"), task.dataset("test")
    for side, src, causal in (("encoder", True, False), ("decoder", False, True)):
        bucket = _buckets(getattr(model, side).layers[0].self_attn.pieces[0])
        reached, never, total = set(), 0, 0
        for n in (train.src_sizes if src else train.tgt_sizes).tolist():
            reached.update(bucket[j - i] for i in range(n) for j in range(n) if not (causal and j > i))
        for n in (test.src_sizes if src else test.tgt_sizes).tolist():
            for i in range(n):
                for j in range(n):
                    if not (causal and j > i):
                        total += 1
                        never += bucket[j - i] not in reached
        assert_close(report["splits"]["test"][f"{side}.0"], never / total)


def _layer_inputs(model, batch):
    """Each self-attention layer's input and key padding mask, from a float64 copy's forward."""
    seen = {}
    hooks = []
    for side in ("encoder", "decoder"):
        for i, layer in enumerate(getattr(model, side).layers):
            def hook(mod, args, kwargs, _out, key=(side, i)):
                seen[key] = (kwargs["query"], kwargs.get("key_padding_mask"))
            hooks.append(layer.self_attn.register_forward_hook(hook, with_kwargs=True))
    with torch.no_grad():
        model(**batch["net_input"])
    for h in hooks:
        h.remove()
    return seen


def test_logit_and_bias_scales_equal_a_float64_loop(run):
    _, report, _, model, _, _, batches = run
    m64 = copy.deepcopy(model).double().eval()
    logits, biases = {}, {}
    for batch in batches:
        for (side, i), (x, kpm) in _layer_inputs(m64, batch).items():
            attn = getattr(m64, side).layers[i].self_attn
            piece = attn.pieces[0]
            T, B, C = x.shape
            H, D = attn.num_heads, attn.head_dim
            q = (x @ attn.q_proj.weight.T + attn.q_proj.bias).view(T, B, H, D).tolist()
            k = (x @ attn.k_proj.weight.T + attn.k_proj.bias).view(T, B, H, D).tolist()
            table = piece.table().tolist()
            bucket = _buckets(piece)
            for b in range(B):
                real = [t for t in range(T) if kpm is None or not kpm[b, t]]
                for h in range(H):
                    lv = logits.setdefault((side, i, h), [])
                    bv = biases.setdefault((side, i, h), [])
                    for qi in real:
                        for kj in real:
                            if side == "decoder" and kj > qi:
                                continue
                            dot = sum(a * c for a, c in zip(q[qi][b][h], k[kj][b][h]))
                            lv.append(dot / math.sqrt(D))
                            bv.append(table[bucket[kj - qi]][h])
    for key, got in report["logits"].items():
        side, i = key.split(".")
        H = len(got["logit_std"])
        want = [_std(logits[(side, int(i), h)]) for h in range(H)]
        want_bias = [_std(biases[(side, int(i), h)]) for h in range(H)]
        assert_close(torch.tensor(got["logit_std"], dtype=torch.float64),
                     torch.tensor(want, dtype=torch.float64), rtol=1e-4, atol=1e-6)
        assert_close(torch.tensor(got["bias_std"], dtype=torch.float64),
                     torch.tensor(want_bias, dtype=torch.float64), rtol=1e-4, atol=1e-6)
        assert_close(got["ratio"], [b / a for a, b in zip(want, want_bias)], rtol=2e-4, atol=1e-6)
    assert len(report["logits"]) == 5  # 3 encoder + 2 decoder self-attention layers


def test_position_probe_equals_an_augmented_least_squares_in_float64(run):
    """Ridge regression written as least squares on rows [X; sqrt(penalty) I] (no penalty on
    the intercept), features from a float64 copy, positions counted token by token."""
    import numpy as np

    _, report, _, model, _, _, batches = run
    m64 = copy.deepcopy(model).double().eval()
    rows = {"encoder": [], "decoder": []}
    with torch.no_grad():
        for batch in batches:
            net = batch["net_input"]
            enc = m64.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
            dec, _ = m64.decoder(net["prev_output_tokens"], encoder_out=enc, features_only=True)
            for side, tokens, h in (("encoder", net["src_tokens"], enc["encoder_out"][0].transpose(0, 1)),
                                    ("decoder", net["prev_output_tokens"], dec)):
                pad = getattr(m64, side).padding_idx
                for b in range(tokens.size(0)):
                    sentence = []
                    for t in range(tokens.size(1)):
                        if int(tokens[b, t]) != pad:
                            sentence.append((h[b, t].tolist(), len(sentence)))
                    n = len(sentence)
                    rows[side].append([(f, i, i / max(n - 1, 1)) for f, i in sentence])
    for side, sentences in rows.items():
        for target, key in ((1, "index_r2"), (2, "fraction_r2")):
            fit_x, fit_y, held_x, held_y = [], [], [], []
            for k, sentence in enumerate(sentences):
                for tok in sentence:
                    (fit_x if k % 2 == 0 else held_x).append(tok[0] + [1.0])
                    (fit_y if k % 2 == 0 else held_y).append(tok[target])
            C = len(fit_x[0]) - 1
            ridge = math.sqrt(diag.RIDGE) * np.eye(C, C + 1)
            w = np.linalg.lstsq(np.vstack([np.array(fit_x), ridge]),
                                np.concatenate([np.array(fit_y), np.zeros(C)]), rcond=None)[0]
            pred = np.array(held_x) @ w
            y = np.array(held_y)
            r2 = 1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum()
            assert_close(report["position_probe"][side][key], float(r2), rtol=0, atol=1e-4)


def test_gradients_and_adam_steps_equal_fairseqs_adam_in_float64(run):
    _, report, state, model, cfg, task, batches = run
    from fairseq.optim.adam import Adam

    criterion = task.build_criterion(cfg.criterion)
    opt_state = state["last_optimizer_state"]
    sums_per_batch = []
    for batch in batches:
        m64 = copy.deepcopy(model).double().eval()
        params = [(n, p) for n, p in m64.named_parameters() if p.requires_grad]
        loss, sample_size, _ = criterion(m64, batch)
        loss.backward()
        before = [p.detach().clone() for _, p in params]
        for _, p in params:
            p.grad = p.grad / sample_size
        grads = [p.grad.clone() for _, p in params]
        adam = Adam([p for _, p in params], lr=1.0)
        adam.load_state_dict(copy.deepcopy(opt_state))  # the run's moments, step count and lr
        adam.step()
        sums = {}
        for (n, p), p0, g in zip(params, before, grads):
            s = sums.setdefault(diag.group_of(n), [0.0, 0.0, 0.0])
            s[0] += float(g.pow(2).sum())
            s[1] += float((p.detach() - p0).pow(2).sum())
            s[2] += float(p0.pow(2).sum())
        sums_per_batch.append({k: (math.sqrt(g), math.sqrt(u / w)) for k, (g, u, w) in sums.items()})
    got = report["gradients"]
    assert set(got) == set(sums_per_batch[0])
    assert any(k.endswith("bucket_bias") for k in got)
    for k, v in got.items():
        assert_close(v["grad_norm"], statistics.mean(b[k][0] for b in sums_per_batch), rtol=1e-4, atol=0)
        assert_close(v["step_ratio"], statistics.mean(b[k][1] for b in sums_per_batch), rtol=1e-4, atol=0)


def test_relpos_run_without_saved_moments_reports_its_tables_and_adams_first_step():
    """A relpos run saved without optimizer state (the shared trained fixture): its two tables,
    no buckets, and the step of a fresh fairseq Adam at the run's lr."""
    from fairseq.optim.adam import Adam
    from trained_models import trained

    from fairseq_attn_plugins.loading import load_model_ensemble_and_task

    path = trained("relpos")
    report = diag.diagnose(os.path.dirname(path), n_batches=1)
    assert not report["optimizer_state"] and report["token_positions"] == "none"
    from fairseq_attn_plugins.checkpoint_safety import safe_load
    saved = safe_load(path)["model"]
    want = sorted(k for k in saved if k.endswith(("rel_keys", "rel_values")))
    assert want and sorted(report["tables"]) == want
    assert report["bucket_pairs"] == {} and report["over_training"][-1]["adam_step_ratio"] == {}
    models, cfg, task = load_model_ensemble_and_task([path])
    batch = diag.training_batches(task, cfg, 1)[0]
    m64 = copy.deepcopy(models[0]).double().eval()
    params = [(n, p) for n, p in m64.named_parameters() if p.requires_grad]
    loss, sample_size, _ = task.build_criterion(cfg.criterion)(m64, batch)
    loss.backward()
    before = [p.detach().clone() for _, p in params]
    for _, p in params:
        p.grad = p.grad / sample_size
    Adam([p for _, p in params], lr=cfg.optimization.lr[0]).step()
    for key in report["tables"]:
        (p, p0), = [(p, p0) for (n, p), p0 in zip(params, before) if n == key]
        want = float((p.detach() - p0).norm() / p0.norm())
        assert_close(report["gradients"][key]["step_ratio"], want, rtol=1e-4, atol=0)


def test_saved_adam_step_is_adams_formula_on_the_saved_moments(run):
    """The saved moments' own next step: Adam's formula without a new gradient, written out."""
    _, report, state, model, *_ = run
    group = state["last_optimizer_state"]["param_groups"][0]
    b1, b2 = group["betas"]
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    sums = {}
    for i, n in enumerate(names):
        st = state["last_optimizer_state"]["state"][i]
        m, v, t = st["exp_avg"].double().flatten().tolist(), st["exp_avg_sq"].double().flatten().tolist(), st["step"]
        step = group["lr"] * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        u2 = sum((step * mi / (math.sqrt(vi) + group["eps"])) ** 2 for mi, vi in zip(m, v))
        p2 = float(state["model"][n].double().pow(2).sum())
        s = sums.setdefault(diag.group_of(n), [0.0, 0.0])
        s[0] += u2
        s[1] += p2
    got = report["over_training"][-1]["adam_step_ratio"]
    assert set(got) == set(sums)
    for k, (u2, p2) in sums.items():
        assert_close(got[k], math.sqrt(u2 / p2))


def test_command_writes_the_report_and_refuses_a_folder_without_checkpoints(run, tmp_path, capsys):
    run_dir = run[0]
    out = tmp_path / "r.json"
    diag.main([run_dir, "--batches", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["token_positions"] == "none" and report["checkpoint"] == "checkpoint_last.pt"
    assert "bucket_bias" in printed and "training pairs" in printed
    with pytest.raises(SystemExit, match="no checkpoint"):
        diag.main([str(tmp_path), "--batches", "1"])
    with pytest.raises(SystemExit, match="--splits: no split 'tset'"):
        diag.main([run_dir, "--splits", "tset"])


def test_training_cap_is_read_from_the_run_record(tmp_path):
    assert diag.training_cap(str(tmp_path)) is None
    (tmp_path / "run.json").write_text(json.dumps({"format": 1, "data": {"settings": {"TRAIN_MAX_LEN": "20"}}}))
    assert diag.training_cap(str(tmp_path)) == 20
    (tmp_path / "run.json").write_text(json.dumps({"format": 1, "data": {"settings": {"TRAIN_MAX_LEN": ""}}}))
    assert diag.training_cap(str(tmp_path)) is None
    (tmp_path / "run.json").write_text(json.dumps({"data": {"settings": {"TRAIN_MAX_LEN": "20"}}}))
    with pytest.raises(ValueError, match="not a run record of format 1"):  # never read as "no cap"
        diag.training_cap(str(tmp_path))
