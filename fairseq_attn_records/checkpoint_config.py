"""A fairseq checkpoint's state without its tensors, read without torch.

A torch checkpoint is a zip archive whose ``data.pkl`` holds the state; each tensor in it is a
call of ``torch._utils._rebuild_tensor_v2`` on a storage kept in another member. The reporting
commands need only the configuration a checkpoint holds (``cfg``: plain dicts and an
``argparse.Namespace``), and the recipes' steps the update number and epoch it was saved at
(:func:`saved_at`), yet reading them with torch and the plugin's allowlist
(:mod:`fairseq_attn_plugins.checkpoint_identity`) imports fairseq, about 1.5 s per command.

:func:`state_without_tensors` unpickles ``data.pkl`` with an unpickler that builds only
``OrderedDict`` and ``argparse.Namespace`` (:data:`CLASSES`), and puts :data:`TENSOR` where each
tensor was (no storage is read). Any other class, a file that is not such an archive, or a broken
one gives None: the caller then reads the checkpoint with torch, whose answer or one-line error
is the one to give. No pickled code runs either way.
"""

import argparse
import collections
import io
import pickle
import zipfile
from typing import Dict, Optional

#: the classes this reader builds (fairseq writes these into a checkpoint's configuration)
CLASSES = {("collections", "OrderedDict"): collections.OrderedDict,
           ("argparse", "Namespace"): argparse.Namespace}
#: what stands for each tensor of the state
TENSOR = "<tensor>"


class _NotPlain(Exception):
    pass


def _tensor(*_args):
    return TENSOR


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in CLASSES:
            return CLASSES[(module, name)]
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _tensor
        if module == "torch" and name.endswith("Storage"):  # named by each tensor's storage key
            return name
        raise _NotPlain(f"{module}.{name}")

    def persistent_load(self, pid):
        return None  # a tensor's storage: not read


def state_without_tensors(path: str) -> Optional[Dict]:
    """The checkpoint's state with :data:`TENSOR` for each tensor, or None where this reader
    cannot tell (read it with torch then)."""
    try:
        with zipfile.ZipFile(path) as z:
            pickles = [n for n in z.namelist() if n.count("/") == 1 and n.endswith("/data.pkl")]
            if len(pickles) != 1:
                return None
            state = _Unpickler(io.BytesIO(z.read(pickles[0]))).load()
    except (_NotPlain, OSError, zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, TypeError,
            AttributeError, IndexError, KeyError, RecursionError):
        return None
    return state if isinstance(state, dict) else None


def saved_at(state: Dict) -> Dict:
    """``{"num_updates", "epoch"}`` a checkpoint's state was saved at (at an epoch's end fairseq stores
    the next epoch to start: the one that ended is said)."""
    hist = state.get("optimizer_history") or [{}]
    it = (state.get("extra_state") or {}).get("train_iterator") or {}
    epoch = it.get("epoch")
    if epoch is not None and epoch > 1 and it.get("iterations_in_epoch") == 0:
        epoch -= 1  # saved at an epoch's end: fairseq stores the next epoch to start
    return {"num_updates": hist[-1].get("num_updates"), "epoch": epoch}
