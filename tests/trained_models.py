"""Tiny models trained once per test run on the toy corpus (not a test module).

Every test file that needs a real trained checkpoint asks :func:`trained` for it; the
first call in the run, in whichever pytest-xdist worker, trains it with fairseq-train (in
process) and every later call, in any worker, reuses it (:mod:`shared_builds`).
"""

import functools
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from cli_helpers import PLUGIN_DIR, TINY, TRAIN, shared_data, train_in_process  # noqa: E402
from shared_builds import build_once  # noqa: E402

#: name -> (--arch, extra flags)
MODELS = {
    # Shaw et al. relpos (keys and values, no absolute positions): the shared model
    "relpos": ("transformer_relpos_wmt_en_de", ["--relpos-k", "4"]),
    # stock fairseq Transformer: the start of fine-tuning
    "stock": ("transformer_wmt_en_de", []),
    # CSAN-2D with an explicit piece flag recorded at training
    "csan2d": ("transformer_csan2d_wmt_en_de", ["--csan-heads", "3", "--csan-window", "3"]),
}


def data_dir() -> str:
    """The toy corpus binarised by fairseq-preprocess, joined dictionary (made once per run)."""
    return shared_data(300)


@functools.lru_cache(maxsize=None)
def trained(name: str, updates: int = 80) -> str:
    """Path of ``checkpoint_last.pt`` of model ``name`` after ``updates`` updates."""
    arch, extra = MODELS[name]
    data = data_dir()

    def make(save):
        train_in_process([data, "--user-dir", PLUGIN_DIR, "--arch", arch, *TINY, *TRAIN, *extra,
                          "--lr", "3e-3", "--max-update", str(updates), "--save-dir", save,
                          "--no-save-optimizer-state", "--save-interval-updates", "100000",
                          "--disable-validation", "--share-all-embeddings"])

    # the key names the settings: a model is shared only with callers asking for the same one
    key = "trained_" + "_".join([name, str(updates), arch, *extra]).replace("-", "").replace("/", "")
    return os.path.join(build_once(key, make), "checkpoint_last.pt")
