"""Run records (run.json) for run folders made by hand in the reporting tests: the identity is
fairseq's own resolution of real fairseq-train arguments (architecture defaults included), as
train.sh records it; nothing is trained."""

import os
import uuid

from fairseq_attn_recipes.recording import resolve_train_args
from fairseq_attn_records import run_record

PLUGIN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fairseq_attn_plugins")


_RESOLVED = {}  # fairseq's resolution costs seconds (hydra): once per argument list


def write_record(run_dir, arch, *flags, num_updates=10, data_id="data-a", seed=1, max_tokens=400):
    key = (arch, flags, seed, max_tokens)
    if key not in _RESOLVED:
        _RESOLVED[key] = _identity(arch, flags, seed, max_tokens)
    rec = dict(_RESOLVED[key])
    rec.update(format=run_record.FORMAT, run_id=uuid.uuid4().hex, trainings=[], checkpoints={}, evaluations={},
               num_updates=num_updates, data={"path": f"/data/{data_id}", "data_id": data_id})
    os.makedirs(run_dir, exist_ok=True)
    run_record.save(str(run_dir), rec)
    return rec


def _identity(arch, flags, seed, max_tokens):
    cfg = resolve_train_args(["/nonexistent-data", "--user-dir", PLUGIN_DIR, "--arch", arch,
                              "--optimizer", "adam", "--lr-scheduler", "inverse_sqrt",
                              "--max-tokens", str(max_tokens), "--seed", str(seed), *flags])
    ident = run_record.identity_of_cfg(cfg)
    ident.pop("max_update")
    return ident
