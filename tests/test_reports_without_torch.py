"""The reporting package starts without torch and fairseq: importing any of its modules loads
neither (nor the plugin, nor the core), the commands fairseq-attn-results, -significance and
-plot answer ``--help`` in a process where torch and fairseq cannot be imported, and a
significance test runs there to its end. Subprocesses, so that other tests keep torch."""

import json
import subprocess
import sys

from fairseq_attn_records.toy_corpus import make_corpus

HEAVY = ("torch", "fairseq", "fairseq_cli", "fairseq_attn_plugins", "fairseq_attn_core")
BLOCK = "import sys\nfor name in ('torch', 'fairseq'):\n    sys.modules[name] = None\n"


def run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)


def test_importing_every_module_of_the_reporting_package_loads_no_torch():
    done = run(
        "import importlib, json, pkgutil, sys\n"
        "import fairseq_attn_reports\n"
        "names = [m.name for m in pkgutil.walk_packages(fairseq_attn_reports.__path__, 'fairseq_attn_reports.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print(json.dumps({'modules': names, 'heavy': heavy}))\n")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"fairseq_attn_reports.cli.results", "fairseq_attn_reports.cli.significance",
            "fairseq_attn_reports.cli.plot", "fairseq_attn_reports.runs"} <= set(out["modules"])
    assert out["heavy"] == []


def test_the_commands_answer_help_where_torch_and_fairseq_cannot_be_imported():
    for command in ("results", "significance", "plot"):
        done = run(BLOCK + f"from fairseq_attn_reports.cli.{command} import main\n"
                   "try:\n    main(['--help'])\nexcept SystemExit as e:\n    sys.exit(e.code)\n")
        assert done.returncode == 0, (command, done.stderr)
        assert f"usage: fairseq-attn-{command}" in done.stdout, command


def test_a_significance_test_runs_where_torch_and_fairseq_cannot_be_imported(tmp_path):
    corpus = make_corpus(40, seed=3)
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(t for _, t in corpus) + "\n")
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("\n".join(t if i % 3 else "x" for i, (_, t) in enumerate(corpus)) + "\n")
    out_json = tmp_path / "sig.json"
    done = run(BLOCK + "from fairseq_attn_reports.cli.significance import main\n"
               f"sys.exit(main([{str(ref)!r}, {str(ref)!r}, {str(hyp)!r}, '--json', {str(out_json)!r}]))\n")
    assert done.returncode == 0, done.stderr
    systems = json.loads(out_json.read_text())["systems"]
    assert [round(s["bleu"], 6) for s in systems][0] == 100.0 and systems[1]["bleu"] < 100.0
