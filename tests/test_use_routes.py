"""A trained checkpoint through every documented route of use: the Python loader in a fresh
interpreter, the hub interface, fairseq-interactive, and --model-overrides checked like
training flags (on real tiny checkpoints trained once per session)."""

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
import trained_models  # noqa: E402
from cli_helpers import PLUGIN_DIR, generate_in_process  # noqa: E402

from fairseq_attn_core import PieceConfigError, SelfAttention  # noqa: E402
from fairseq_attn_plugins.checkpoint_safety import safe_load  # noqa: E402
from fairseq_attn_records import generate_output  # noqa: E402
from fairseq_attn_plugins.loading import from_pretrained, load_model_ensemble_and_task  # noqa: E402

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def relpos():
    return trained_models.trained("relpos")


def hypotheses(output):
    """fairseq-generate/interactive output -> {sentence id: hypothesis string} (the package's one reader)."""
    return generate_output.hypotheses(output.splitlines())


def generate(ck, *extra):
    return generate_in_process([trained_models.data_dir(), "--user-dir", PLUGIN_DIR, "--path", ck,
                                "--beam", "4", "--batch-size", "4", "--cpu", *extra])


def test_loader_in_a_fresh_interpreter(relpos):
    """fairseq's own loader fails before the plugin is imported (torch's weights-only refusal);
    ours loads the checkpoint's exact weights without importing anything first."""
    script = f"""
import json, sys
from fairseq import checkpoint_utils
try:
    checkpoint_utils.load_model_ensemble_and_task([{relpos!r}], arg_overrides={{"data": {trained_models.data_dir()!r}}})
    plain = "loaded"
except Exception as e:
    plain = type(e).__name__ + ": " + str(e).splitlines()[0]
from fairseq_attn_plugins.loading import load_model_ensemble_and_task
models, cfg, task = load_model_ensemble_and_task([{relpos!r}], arg_overrides={{"data": {trained_models.data_dir()!r}}})
import torch
torch.save({{k: v for k, v in models[0].state_dict().items()}}, sys.argv[1])
print(json.dumps({{"plain": plain, "model": type(models[0]).__name__, "arch": cfg.model.arch,
                  "user_dir": cfg.common.user_dir}}))
"""
    out_path = os.path.join(os.path.dirname(relpos), "loaded_state.pt")
    p = subprocess.run([sys.executable, "-c", script, out_path], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    info = json.loads(p.stdout.strip().splitlines()[-1])
    assert "Weights only load failed" in info["plain"] or "weights_only" in info["plain"], info
    assert info["model"] == "AttnTransformerModel" and info["arch"] == "transformer_relpos_wmt_en_de"
    assert info["user_dir"] == PLUGIN_DIR
    loaded = torch.load(out_path, weights_only=True)
    saved = safe_load(relpos)["model"]
    assert any(k.endswith("rel_keys") for k in saved)
    for k, v in saved.items():
        torch.testing.assert_close(loaded[k], v, rtol=0, atol=0, msg=k)


def test_hub_and_interactive_translate_like_generate(relpos, tmp_path):
    """fairseq's hub interface (ours and TransformerModel.from_pretrained with user_dir) and
    fairseq-interactive give fairseq-generate's beam-4 hypotheses on the test set."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.models.transformer import TransformerModel
    from fairseq_cli import interactive

    data = trained_models.data_dir()
    gen = hypotheses(generate(relpos))
    src = [line.rstrip("\n") for line in open(os.path.join(data, "..", "raw", "test.src"), encoding="utf-8")]
    assert len(gen) == len(src) == 12

    run_dir, name = os.path.split(relpos)
    for hub in (from_pretrained(run_dir, name, data),
                TransformerModel.from_pretrained(run_dir, name, data, user_dir=PLUGIN_DIR)):
        hub.eval()
        got = hub.translate(src, beam=4)
        assert got == [gen[i] for i in range(len(src))]

    inp = tmp_path / "input.txt"
    inp.write_text("\n".join(src) + "\n", encoding="utf-8")
    args = options.parse_args_and_arch(options.get_interactive_generation_parser(), [
        data, "--user-dir", PLUGIN_DIR, "--path", relpos, "--beam", "4", "--cpu", "--input", str(inp),
        "--buffer-size", "4", "--batch-size", "4", "--source-lang", "src", "--target-lang", "tgt"])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        interactive.main(convert_namespace_to_omegaconf(args))
    assert hypotheses(buf.getvalue()) == gen


# ------------------------------------------------------------------ --model-overrides
def test_override_of_an_inactive_piece_flag_is_refused(relpos):
    with pytest.raises(PieceConfigError, match=r"--csan-window belongs to csan1d / csan2d.*"
                                               r"active pieces are \['relpos'\]"):
        generate(relpos, "--model-overrides", "{'csan_window': 5}")
    # the loader's arg_overrides follow the same rule
    with pytest.raises(PieceConfigError, match="csan_window"):
        load_model_ensemble_and_task([relpos], {"data": trained_models.data_dir(), "csan_window": 5})


def test_override_of_the_pieces_checks_only_the_overrides():
    """A csan2d checkpoint trained with --csan-heads: overriding attn_pieces at generation is
    not refused for that training flag; the model is built without the piece."""
    ck = trained_models.trained("csan2d", updates=2)
    out = generate(ck, "--model-overrides", "{'attn_pieces': ''}")
    assert len(hypotheses(out)) == 12
    models, _, _ = load_model_ensemble_and_task([ck], {"data": trained_models.data_dir(), "attn_pieces": ""})
    attns = [m for m in models[0].modules() if isinstance(m, SelfAttention)]
    assert attns and all(len(m.pieces) == 0 for m in attns)
    # a flag of the piece that the override dropped is refused
    with pytest.raises(PieceConfigError, match="--csan-heads belongs to csan1d / csan2d"):
        generate(ck, "--model-overrides", "{'attn_pieces': '', 'csan_heads': 1}")


def test_attn_backend_override_and_stock_checkpoints(relpos):
    """{'attn_backend': ...} is how generation picks the backend; attention flags on a stock
    checkpoint are refused (they would do nothing)."""
    models, _, _ = load_model_ensemble_and_task([relpos], {"data": trained_models.data_dir(),
                                                           "attn_backend": "explicit"})
    assert {m.backend for m in models[0].modules() if isinstance(m, SelfAttention)} == {"explicit"}
    stock = trained_models.trained("stock", updates=2)
    with pytest.raises(PieceConfigError, match=r"not a transformer_attn architecture"):
        generate(stock, "--model-overrides", "{'attn_pieces': 'relpos'}")


# ------------------------------------------------------------------ override typos, one-line refusals
def refusal_printed(exc):
    """What a fairseq command prints for ``exc`` left uncaught: the hook the plugin installs there
    (only there: pytest's interpreter keeps its own)."""
    from fairseq_attn_plugins.integration import refusals

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        refusals.excepthook(type(exc), exc, exc.__traceback__)
    return err.getvalue()


def validate(ck, *extra):
    """fairseq-validate's cli_main on the test subset, in this process."""
    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import validate as fairseq_validate

    argv = [trained_models.data_dir(), "--user-dir", PLUGIN_DIR, "--task", "translation", "--path", ck, "--valid-subset", "test",
            "--batch-size", "4", "--cpu", "--num-workers", "0", *extra]
    args = options.parse_args_and_arch(options.get_validation_parser(), argv)
    override_args = options.parse_args_and_arch(options.get_validation_parser(), argv, suppress_defaults=True)
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), fairseq_validate.main,
                                override_args=override_args)


def test_override_typos_are_refused_with_the_nearest_name(relpos, tmp_path):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.models.transformer import TransformerModel
    from fairseq_cli import interactive

    data = trained_models.data_dir()
    run_dir, name = os.path.split(relpos)
    window = r"override 'csan_windw' is not a flag of this checkpoint's model or of fairseq \(did you mean 'csan_window'"
    backend = r"override 'attn_backed' is not a flag .*\(did you mean 'attn_backend'"
    for overrides, match in (("{'csan_windw': 5}", window), ("{'attn_backed': 'explicit'}", backend)):
        with pytest.raises(PieceConfigError, match=match) as e:  # fairseq-generate
            generate(relpos, "--model-overrides", overrides)
        printed = refusal_printed(e.value)
        assert printed.startswith(f"error: {relpos}: override ") and printed.count("\n") == 1
        with pytest.raises(PieceConfigError, match=match):  # fairseq-validate
            validate(relpos, "--model-overrides", overrides)
    inp = tmp_path / "input.txt"
    inp.write_text("a b c\n", encoding="utf-8")
    args = options.parse_args_and_arch(options.get_interactive_generation_parser(), [
        data, "--user-dir", PLUGIN_DIR, "--path", relpos, "--cpu", "--input", str(inp), "--source-lang", "src",
        "--target-lang", "tgt", "--model-overrides", "{'csan_windw': 5}"])
    with pytest.raises(PieceConfigError, match=window):  # fairseq-interactive
        interactive.main(convert_namespace_to_omegaconf(args))
    with pytest.raises(PieceConfigError, match=window):  # the loaders
        load_model_ensemble_and_task([relpos], {"data": data, "csan_windw": 5})
    with pytest.raises(PieceConfigError, match=backend):  # the hub's arg_overrides, ours and fairseq's
        from_pretrained(run_dir, name, data, attn_backed="explicit")
    with pytest.raises(PieceConfigError, match=window):
        TransformerModel.from_pretrained(run_dir, name, data, user_dir=PLUGIN_DIR, csan_windw=5)
    # known names pass on every route: fairseq's own (validate gives every flag it was given as
    # an override; the hub the fields of its generation, bpe and tokenizer choices)
    validate(relpos)
    hub = from_pretrained(run_dir, name, data, beam=2, moses_no_dash_splits=True)
    hub.eval()
    assert len(hub.translate(["a b c"], beam=2)) == 1


def test_refusals_print_one_line(relpos, stock_two_updates, tmp_path):
    """The refusals of a flag, an override and a checkpoint restore: one line each from the
    plugin's hook (what fairseq's commands print), no traceback; a real fairseq-generate too."""
    cases = [
        ("{'csan_window': 5}", r"--csan-window belongs to csan1d / csan2d.*active pieces are \['relpos'\]"),
        ("{'attn_backend': 'fused'}", r"--attn-backend fused: "),
        ("{'relpos_k': -3}", r"--relpos-k"),
    ]
    for overrides, match in cases:
        with pytest.raises(PieceConfigError, match=match) as e:
            generate(relpos, "--model-overrides", overrides)
        printed = refusal_printed(e.value)
        assert printed.startswith("error: ") and printed.count("\n") == 1 and "Traceback" not in printed, printed
    # fine-tuning a stock checkpoint into relpos without --attn-init-new-params
    from cli_helpers import TINY, TRAIN, train_in_process
    with pytest.raises(PieceConfigError, match=r"--attn-init-new-params") as e:
        train_in_process([trained_models.data_dir(), "--user-dir", PLUGIN_DIR, "--arch", "transformer_relpos_wmt_en_de",
                          *TINY, *TRAIN, "--max-update", "1", "--save-dir", str(tmp_path / "ft"),
                          "--finetune-from-model", stock_two_updates, "--share-all-embeddings"])
    printed = refusal_printed(e.value)
    assert printed.startswith("error: checkpoint lacks ") and printed.count("\n") == 1
    # fairseq-generate itself: the refusal is its last line of output, and no traceback
    p = subprocess.run([sys.executable, "-m", "fairseq_cli.generate", trained_models.data_dir(), "--user-dir",
                        PLUGIN_DIR, "--path", relpos, "--cpu", "--batch-size", "4", "--model-overrides",
                        "{'csan_windw': 5}"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.stderr.splitlines()[-1].startswith(f"error: {relpos}: override 'csan_windw' is not a flag")


@pytest.fixture(scope="module")
def stock_two_updates():
    return trained_models.trained("stock", updates=2)


def test_a_model_flag_given_to_fairseq_generate_names_the_override_that_sets_it(relpos):
    """fairseq-generate has no model flag (it builds the model from the checkpoint): a model flag
    given there is refused in one line naming the --model-overrides that sets it, and that
    override, copied from the line, generates."""
    p = subprocess.run([sys.executable, "-m", "fairseq_cli.generate", trained_models.data_dir(), "--user-dir",
                        PLUGIN_DIR, "--path", relpos, "--cpu", "--batch-size", "4", "--attn-flex-compile", "none"],
                       capture_output=True, text=True, timeout=600)
    said = [line for line in p.stderr.splitlines() if "tensorboardX" not in line]
    assert p.returncode == 2 and len(said) == 1, p.stderr[-3000:]
    route = "--model-overrides \"{'attn_flex_compile': 'none'}\""
    assert said[0].startswith("error: unrecognized arguments: --attn-flex-compile none (") and route in said[0], said
    assert "--attn-type" not in said[0]
    overrides = said[0].split("--model-overrides \"", 1)[1].split("\"", 1)[0]
    assert hypotheses(generate(relpos, "--model-overrides", overrides)) == hypotheses(generate(relpos))
