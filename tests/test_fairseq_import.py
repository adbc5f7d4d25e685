"""fairseq imported by this distribution's commands without scikit-learn and scipy.stats
(``fairseq_attn_records/fairseq_import.py``): the commands' processes load neither; the names
fairseq holds, when called, return what the real functions return; a later import anywhere in
the process gets the real modules. In fresh interpreters, so that what other tests imported
does not count."""

import json
import subprocess
import sys

import numpy as np

DEFERRED = ("sklearn", "sklearn.metrics", "scipy.stats")
LOADED = f"sorted(m for m in {DEFERRED!r} if m in sys.modules)"


def run_python(code: str) -> str:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def as_module(module: str, *argv: str) -> str:
    """``python -m MODULE ARGV`` (runpy, as ``-m`` runs it) printing, at exit, the deferred
    modules it loaded as the last line."""
    return ("import atexit, json, runpy, sys\n"
            f"atexit.register(lambda: print(json.dumps({LOADED})))\n"
            f"sys.argv = ['-m', *{list(argv)!r}]\n"
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")


# the two float64 samples, and the label vectors, the deferred functions are called on
X = [0.5, 1.25, -0.75, 2.0, 3.5, 0.125]
Y = [0.25, 1.5, -1.0, 2.5, 3.0, 0.5]
TRUE = [1, 0, 1, 1, 0, 1]
PRED = [1, 1, 1, 0, 0, 1]

# a fairseq-attn command (sys.argv[0] names it) importing the plugin: fairseq-attn-pieces reads its
# arguments before it loads the plugin (torch and fairseq not imported yet), then loads it; then the
# names fairseq's criterion and task hold are called, then sklearn.metrics and scipy.stats imported
IN_A_COMMAND = (
    "import json, sys\n"
    "sys.argv = ['fairseq-attn-pieces']\n"
    "import numpy as np\n"
    "from fairseq_attn_plugins.cli import pieces\n"
    "read_first = sorted(m for m in ('torch', 'fairseq') if m in sys.modules)\n"
    "pieces.registration.register()\n"
    f"after_import = {LOADED}\n"
    "from fairseq.models import ARCH_MODEL_REGISTRY\n"
    "registered = 'transformer_relpos_wmt_en_de' in ARCH_MODEL_REGISTRY\n"
    "from fairseq.criterions import sentence_prediction as sp\n"
    "from fairseq.tasks import audio_classification as ac\n"
    f"x, y = np.array({X!r}, dtype=np.float64), np.array({Y!r}, dtype=np.float64)\n"
    f"t, p = np.array({TRUE!r}), np.array({PRED!r})\n"
    "import sklearn.metrics, scipy.stats\n"
    "real = {'sklearn.metrics': type(sklearn.metrics).__name__, 'scipy.stats': type(scipy.stats).__name__,\n"
    "        'sklearn.metrics is sys.modules': sklearn.metrics is sys.modules['sklearn.metrics'],\n"
    "        'file': sklearn.metrics.__file__,\n"
    "        'task module attribute is the real one': ac.sklearn_metrics.roc_auc_score is sklearn.metrics.roc_auc_score}\n"
    "print(json.dumps({'read_first': read_first, 'registered': registered, 'after_import': after_import, 'real': real,\n"
    "                  'f1': float(sp.f1_score(t, p)), 'mcc': float(sp._matthews_corrcoef(t, p)),\n"
    "                  'pearson': [float(v) for v in sp.pearsonr(x, y)], 'spearman': [float(v) for v in sp.spearmanr(x, y)]}))\n"
)


def test_a_command_imports_fairseq_without_them_and_the_names_fairseq_holds_are_the_real_functions():
    import scipy.stats  # here, not at collection: the other tests' processes need neither
    import sklearn.metrics

    got = json.loads(run_python(IN_A_COMMAND).strip().splitlines()[-1])
    assert got["read_first"] == [] and got["registered"]  # the arguments read with neither imported, then loaded
    assert got["after_import"] == []
    # imported after fairseq: the real modules, in sys.modules
    assert got["real"] == {"sklearn.metrics": "module", "scipy.stats": "module", "sklearn.metrics is sys.modules": True,
                           "file": sklearn.metrics.__file__, "task module attribute is the real one": True}
    x, y = np.array(X, dtype=np.float64), np.array(Y, dtype=np.float64)
    t, p = np.array(TRUE), np.array(PRED)
    assert got["f1"] == float(sklearn.metrics.f1_score(t, p))
    assert got["mcc"] == float(sklearn.metrics.matthews_corrcoef(t, p))
    assert got["pearson"] == [float(v) for v in scipy.stats.pearsonr(x, y)]
    assert got["spearman"] == [float(v) for v in scipy.stats.spearmanr(x, y)]


def test_the_training_step_imports_fairseq_without_them():
    out = run_python(as_module("fairseq_attn_recipes.train", "--help"))
    assert "--max-update" in out  # fairseq-train's usage: fairseq was imported and parsed the flags
    assert json.loads(out.strip().splitlines()[-1]) == []


def test_fairseq_preprocess_run_by_the_recipes_prints_what_fairseq_prints_without_them():
    ours = run_python(as_module("fairseq_attn_recipes.fairseq_command", "preprocess", "--help")).strip().splitlines()
    theirs = run_python(as_module("fairseq_cli.preprocess", "--help")).strip().splitlines()
    assert json.loads(ours[-1]) == []
    assert json.loads(theirs[-1]) == sorted(DEFERRED)  # fairseq's own command loads them
    assert ours[:-1] == theirs[:-1] and "--destdir" in "\n".join(ours)


# the recipes' tokenize step, then sacremoses' deferred joblib names called
MOSES_STEP = (
    "import json, sys\n"
    "from fairseq_attn_recipes.__main__ import main  # the step's main (its process then exits at once)\n"
    "try:\n"
    "    main(['tokenize', '--lang', 'de', '--tool', 'moses', sys.argv[1], sys.argv[2]])\n"
    "except SystemExit as e:\n"
    "    assert not e.code, e.code\n"
    "loaded = sorted(m for m in ('joblib', 'numpy') if m in sys.modules)\n"
    "from sacremoses import util\n"
    "called = util.Parallel(n_jobs=1)(util.delayed(abs)(x) for x in (-1, 2, -3))\n"
    "import joblib\n"
    "print(json.dumps({'loaded': loaded, 'called': called, 'real': type(joblib).__name__,\n"
    "                  'Parallel': util.Parallel.__name__}))\n"
)


def test_a_moses_step_imports_sacremoses_without_joblib_and_tokenises_as_sacremoses(tmp_path):
    """sacremoses imports joblib (and with it numpy) for parallel helpers the recipes never call: the
    steps that tokenise or detokenise load neither (fairseq_import.import_sacremoses), write what
    sacremoses writes, and the names sacremoses holds call the real joblib."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    lines = ["Das ist ein gut-gemachter Test, oder?", "„Anführungszeichen“ – und 3.5 Euro…"]
    (tmp_path / "in.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
    p = subprocess.run([sys.executable, "-c", MOSES_STEP, str(tmp_path / "in.de"), str(tmp_path / "out.de")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {"loaded": [], "called": [1, 2, 3], "real": "module", "Parallel": "Parallel"}
    norm, tok = MosesPunctNormalizer(lang="de"), MosesTokenizer(lang="de")
    want = [" ".join(tok.tokenize(norm.normalize(s), aggressive_dash_splits=True, escape=False, return_str=True).split())
            for s in lines]
    assert (tmp_path / "out.de").read_text(encoding="utf-8").splitlines() == want and "@-@" in want[0]
