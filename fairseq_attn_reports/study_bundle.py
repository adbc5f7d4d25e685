"""A finished study's outputs committed beside its table, and the table re-scored from them.

**Export** (:func:`export`): a study table (``lengths.json`` of the long-input study,
``train_concat.json``, a learning curve's ``curve.json``, ``table1.json`` and ``figure2.json`` of the
CSAN paper's recipes, or any ``fairseq-attn-results --json``) is copied to ``DIR/NAME.json``
(its markdown, ``lengths.md`` / ``train_concat.md``, to ``DIR/NAME.md``), and every file it names
(:data:`.study_paths.PATH_KEYS`: references, sources, each system's outputs per seed and k, the
segment-by-segment outputs, concat-test's record of the groups; a table it names, such as the two
studies of ``train_concat.json``, with the files that one names) is packed into
``DIR/NAME/outputs.tar.xz``, with ``DIR/NAME/manifest.json``: the sha256 of the archive and of every
member. The archive mirrors the files' tree below their common folder; every JSON in it and the
copied table name their files relative to their own folder (:mod:`.study_paths`), so the table's
``./`` and ``../`` paths are the archive's members seen from ``manifest["table_dir"]``. The archive
is the same bytes for the same files (members sorted, times and owners zeroed). Every file must be the
one the table scored (the sha256 the table recorded, :data:`.study_paths.SCORED_KEY`): an output
evaluated again since (evaluate.sh with another BEAM) is refused in one line naming the run, the file
and both sha256 (:func:`check_scored`), before anything is written. The manifest names the versions
of sacreBLEU, numpy and torch (:func:`versions`) and holds the sha256 of the committed ``NAME.json``
(and of each of its top-level fields) and ``NAME.md`` (:func:`committed_digests`).

**Re-scoring** (:func:`rescore`): the archive and each member checked against the manifest,
unpacked into a temporary folder, and every scored cell of the table computed again from the
outputs with real sacreBLEU and this package's own table code -- the main table's rows
(:func:`.results.score_rows`, or :func:`.seeds.score_seeds` for seeds), the by-length buckets
(:func:`.by_length.scores_by_length`), every k of the per-k table (:func:`.by_concat.system_cells`
over the same), its segment-by-segment rows (:func:`.by_concat.add_segmentwise`) and the difference
of two training conditions (:func:`.train_conditions.condition_difference`), a learning curve's
points with the order of the systems along it (:mod:`.learning_curve`) and Figure 2's points
(``fairseq-attn-paper figure2``; Table 1's rows are a results table's, over seeds or not) -- with the table's own
settings (metrics, tokeniser, resamples, trials, edges). Every number is compared (relative
tolerance 1e-9) and every mark exactly; what cannot be computed again from the outputs (the markdown's
text, fields such as ``train_ups``) is compared with the manifest's sha256 (:func:`check_committed`,
naming the changed fields); the result lists each difference. Only sacreBLEU's metrics
are re-scored (:data:`RESCORED_METRICS`): a table with COMET (its checkpoint) or AER (the gold
alignments and the models' attention) is refused.
"""

import hashlib
import io
import json
import math
import os
import re
import shutil
import tarfile
import tempfile
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

from fairseq_attn_records.output_files import write_json
from fairseq_attn_records.run_record import file_sha256
from fairseq_attn_records.text_inputs import read_text_lines

from . import by_concat
from .by_length import scores_by_length
from .learning_curve import point_metrics, point_stats, ranking_table
from .results import score_rows
from .seeds import score_seeds
from .significance import paired_tests
from .study_paths import (PATHS_KEY, PATHS_NOTE, SCORED_KEY, changed_since_scored, load_table, path_strings,
                          relative, resolved)
from .train_conditions import condition_difference

ARCHIVE = "outputs.tar.xz"
MANIFEST = "manifest.json"
OUTPUTS_KEY = "outputs"
RESCORE_COMMAND = "python -m fairseq_attn_recipes study-rescore"
REL_TOL = 1e-9


class BundleError(ValueError):
    """A study that cannot be exported or re-scored; the message names the file and why."""


# ------------------------------------------------------------------ export
def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def named_files(table_path: str) -> Dict[str, bytes]:
    """``{absolute path: bytes to store}``: every regular file the table at
    ``table_path`` names, and those the tables it names name (a JSON file is stored as
    :func:`.study_paths.relative` writes it, its paths relative to its own folder). A folder (a
    run's) is not stored; a named path that is neither is an error naming it."""
    stored: Dict[str, bytes] = {}
    tables: List[str] = []
    studies = set()
    todo = [os.path.abspath(table_path)]
    while todo:
        path = todo.pop()
        if path in tables:
            continue
        tables.append(path)
        table = load_table(path)
        if path == tables[0] or path in studies:  # a table (not a record such as concat-test's)
            check_scored(path, table)
        studies.update(path_strings(table.get("studies") or {}))  # a difference's tables of two studies
        for named in path_strings({k: v for k, v in table.items() if k != SCORED_KEY}):
            if not os.path.isabs(named):  # a sentence in a path field ("the test file in order ...")
                continue
            if os.path.isdir(named) or named in stored:
                continue
            if not os.path.isfile(named):
                raise BundleError(f"{path} names {named}, which is not there: the study's outputs must be in place "
                                  f"to export it")
            if named.endswith(".json"):
                stored[named] = json_bytes(relative(load_table(named), os.path.dirname(named)))
                todo.append(named)
            else:
                with open(named, "rb") as f:
                    stored[named] = f.read()
    return stored


def check_scored(path: str, table: Dict) -> None:
    """Every file ``table`` (at ``path``) scored is still the one it scored (its sha256,
    :func:`.study_paths.changed_since_scored`); BundleError naming the run, the file and both sha256
    otherwise, or when the table holds no sha256 of its files (made before tables recorded them)."""
    if SCORED_KEY not in table:
        raise BundleError(f"{path} holds no sha256 of the outputs it scored ({SCORED_KEY}), so the outputs here "
                          f"cannot be told to be those: make its tables again (re-run the study: trained and "
                          f"evaluated runs are skipped), then export")
    for file, scored, now in changed_since_scored(table):
        raise BundleError(f"{path}: {file} of run {run_of(file)} is not the output the table scored (sha256 "
                          f"{scored} scored, {now} now: evaluated again since, e.g. with another BEAM?): make the "
                          f"study's tables again from the outputs there, or restore the one it scored")


def run_of(path: str) -> str:
    """The run folder a file lies in (the nearest folder above it with a run record or a train.log),
    else the file's own folder."""
    d = os.path.dirname(path)
    while d != os.path.dirname(d):
        if os.path.isfile(os.path.join(d, "run.json")) or os.path.isfile(os.path.join(d, "train.log")):
            return d
        d = os.path.dirname(d)
    return os.path.dirname(path)


def json_bytes(obj) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode("utf-8")


def tar_xz(members: Dict[str, bytes]) -> bytes:
    """The members (name -> bytes) as one .tar.xz, the same bytes for the same members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=9, format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(members[name]), 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(members[name]))
    return buf.getvalue()


def export(table_path: str, out_dir: str, name: str, replace: bool = False) -> Dict:
    """Write ``out_dir/NAME.json`` (and ``NAME.md``) and ``out_dir/NAME/`` (archive, manifest);
    returns the manifest. An existing target is refused unless ``replace``."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or name.endswith(".json"):
        raise BundleError(f"--name {name}: give a file name without a folder or extension (letters, digits, _ . -)")
    table_path = os.path.abspath(table_path)
    if not os.path.isfile(table_path):
        raise BundleError(f"{table_path}: no such table")
    table = load_table(table_path)
    per_k = ((table.get("concat") or {}).get("k") or {}).values()
    for metrics in [table.get("metrics")] + [e.get("metrics") for e in per_k]:
        _check_metrics(table_path, metrics)
    stored = named_files(table_path)
    if not stored:
        raise BundleError(f"{table_path}: it names no output file: nothing to export")
    root = os.path.commonpath(list(stored) + [os.path.dirname(table_path)])
    members = {os.path.relpath(p, root).replace(os.sep, "/"): data for p, data in stored.items()}
    archive = tar_xz(members)
    table_dir = os.path.relpath(os.path.dirname(table_path), root).replace(os.sep, "/")
    md_src = os.path.splitext(table_path)[0] + ".md"
    targets = [os.path.join(out_dir, f"{name}.json"), os.path.join(out_dir, name)]
    if os.path.isfile(md_src):
        targets.append(os.path.join(out_dir, f"{name}.md"))
    there = [t for t in targets if os.path.lexists(t)]
    if there and not replace:
        raise BundleError(f"{there[0]} exists: give another --name, or --yes to replace "
                          + ", ".join(there))
    manifest = {"table": f"{name}.json", "table_dir": table_dir, "archive": ARCHIVE,
                "archive_sha256": sha256_bytes(archive),
                "files": {m: {"sha256": sha256_bytes(d), "bytes": len(d)} for m, d in sorted(members.items())},
                **versions(), "recheck": recheck_command(out_dir, name)}
    committed = relative(table, os.path.dirname(table_path))
    committed[PATHS_KEY] = (f"{PATHS_NOTE} as it was written, i.e. of {table_dir}/ in {name}/{ARCHIVE} "
                            f"(the study's files, below their common folder)")
    committed[OUTPUTS_KEY] = {"committed": True, "bundle": f"{name}/{ARCHIVE}", "manifest": f"{name}/{MANIFEST}",
                              "recheck": manifest["recheck"]}
    os.makedirs(out_dir, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=f".{name}.export.", dir=out_dir)
    try:
        os.makedirs(os.path.join(stage, name))
        with open(os.path.join(stage, name, ARCHIVE), "wb") as f:
            f.write(archive)
        write_json(os.path.join(stage, f"{name}.json"), committed, end="\n")
        if os.path.isfile(md_src):
            shutil.copyfile(md_src, os.path.join(stage, f"{name}.md"))
        manifest.update(committed_digests(stage, name))
        write_json(os.path.join(stage, name, MANIFEST), manifest, end="\n")
        for t in there:  # only with replace
            shutil.rmtree(t) if os.path.isdir(t) and not os.path.islink(t) else os.remove(t)
        for entry in sorted(os.listdir(stage)):
            os.rename(os.path.join(stage, entry), os.path.join(out_dir, entry))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return manifest


def repository_root(folder: str):
    """The root of the git repository (or worktree) ``folder`` lies in: the nearest folder above it
    holding ``.git``; None outside one."""
    folder = os.path.realpath(folder)
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def versions() -> Dict[str, Optional[str]]:
    """The versions the numbers were computed with: sacreBLEU (the metrics), numpy (the resampling) and
    torch (the models that wrote the outputs; None where it is not installed), read without importing
    torch."""
    from importlib import metadata

    import numpy
    import sacrebleu
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    return {"sacrebleu": sacrebleu.__version__, "numpy": numpy.__version__, "torch": torch}


def committed_digests(out_dir: str, name: str) -> Dict:
    """The sha256 of the committed ``NAME.json`` and ``NAME.md`` in ``out_dir`` (None: no markdown), and
    of each top-level field of the table (so that the re-check names the field that changed): what
    the re-check cannot compute again from the outputs (the markdown's text, fields such as
    ``train_ups``), it compares with these."""
    table = os.path.join(out_dir, f"{name}.json")
    md = os.path.join(out_dir, f"{name}.md")
    with open(table, encoding="utf-8") as f:
        fields = json.load(f)
    return {"table_sha256": file_sha256(table), "markdown": f"{name}.md" if os.path.isfile(md) else None,
            "markdown_sha256": file_sha256(md) if os.path.isfile(md) else None,
            "table_fields_sha256": {k: _field_sha256(v) for k, v in fields.items()}}


def _field_sha256(value) -> str:
    return sha256_bytes(json.dumps(value, sort_keys=True).encode("utf-8"))


def check_committed(table_path: str, manifest: Dict) -> List[str]:
    """The committed ``NAME.json`` and ``NAME.md`` against the manifest's sha256 (:func:`committed_digests`):
    one difference per changed field of the table and one for the markdown."""
    folder, name = os.path.split(os.path.splitext(table_path)[0])
    if "table_sha256" not in manifest:
        return [f"{os.path.join(folder, name, MANIFEST)}: it holds no sha256 of {name}.json and {name}.md, so "
                f"their fields not re-scored (train_ups, the markdown's text) cannot be checked: export the study "
                f"again"]
    now = committed_digests(folder, name)
    diffs = []
    if now["table_sha256"] != manifest["table_sha256"]:
        want = manifest.get("table_fields_sha256") or {}
        fields = sorted(set(want) | set(now["table_fields_sha256"]))
        changed = [k for k in fields if want.get(k) != now["table_fields_sha256"].get(k)]
        diffs.append(f"{name}.json: sha256 differs from the manifest's: changed since it was exported"
                     + (f" (fields: {', '.join(changed)})" if changed else " (its layout)"))
    if now["markdown_sha256"] != manifest.get("markdown_sha256"):
        diffs.append(f"{name}.md: sha256 differs from the manifest's: changed since it was exported (the re-check "
                     f"cannot compute the markdown again; export the study again to commit a new text)")
    return diffs


def recheck_command(out_dir: str, name: str) -> str:
    """The command that re-checks the exported table, run from the root of the repository it is
    committed to (docs/results/NAME.json), whatever folder study-export ran from; outside a
    repository, from its own folder (never an absolute path)."""
    table = os.path.realpath(os.path.join(out_dir, f"{name}.json"))
    root = repository_root(os.path.dirname(table))
    if root is None:
        return f"{RESCORE_COMMAND} {name}.json (in the folder of {name}.json)"
    return f"{RESCORE_COMMAND} {os.path.relpath(table, root)}"


# ------------------------------------------------------------------ re-scoring
def unpack(table_path: str, into: str) -> Tuple[Dict, List[str]]:
    """(manifest, differences) of the bundle beside ``table_path``, its members written under ``into``
    after the archive's and each member's sha256 are checked (a difference is listed, not fatal)."""
    folder = os.path.splitext(table_path)[0]
    man_path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(man_path):
        with open(table_path, encoding="utf-8") as f:
            outputs = json.load(f).get(OUTPUTS_KEY) or {}
        why = outputs.get("note") if isinstance(outputs, dict) else None
        raise BundleError(f"{table_path}: no bundle of its outputs ({man_path} is missing)"
                          + (f": {why}" if why else ": export the study first (study-export)"))
    with open(man_path, encoding="utf-8") as f:
        manifest = json.load(f)
    diffs = []
    archive = os.path.join(folder, manifest.get("archive", ARCHIVE))
    if not os.path.isfile(archive):
        raise BundleError(f"{archive}: no such archive (named by {man_path})")
    if file_sha256(archive) != manifest["archive_sha256"]:
        diffs.append(f"{archive}: sha256 differs from the manifest's")
    seen = set()
    with tarfile.open(archive, mode="r:xz") as tar:
        for info in tar.getmembers():
            name = info.name
            if not info.isfile() or os.path.isabs(name) or ".." in name.split("/"):
                raise BundleError(f"{archive}: member {name!r} is not a plain file inside the archive's folder")
            data = tar.extractfile(info).read()
            seen.add(name)
            want = (manifest["files"].get(name) or {}).get("sha256")
            if want is None:
                diffs.append(f"{name}: in the archive, not in the manifest")
            elif sha256_bytes(data) != want:
                diffs.append(f"{name}: sha256 differs from the manifest's (the file was changed)")
            dest = os.path.join(into, *name.split("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as f:
                f.write(data)
    for name in sorted(set(manifest["files"]) - seen):
        diffs.append(f"{name}: in the manifest, not in the archive")
    return manifest, diffs


def with_outputs(table_path: str, into: str) -> Dict:
    """A committed table (:func:`export`), its paths resolved into its outputs unpacked under ``into``;
    an archive or member whose sha256 differs from the manifest's is an error naming it."""
    manifest, diffs = unpack(table_path, into)
    if diffs:
        raise BundleError(f"{table_path}: its outputs are not those committed: " + "; ".join(diffs))
    with open(table_path, encoding="utf-8") as f:
        return resolved(json.load(f), os.path.join(into, *manifest["table_dir"].split("/")))


def is_committed(table_path: str) -> bool:
    """The table was written by :func:`export` (its outputs in a bundle beside it)."""
    with open(table_path, encoding="utf-8") as f:
        table = json.load(f)
    return isinstance(table, dict) and bool((table.get(OUTPUTS_KEY) or {}).get("committed"))


class Comparison:
    """Every cell compared: ``checked`` counts them, ``diffs`` says each difference."""

    def __init__(self):
        self.checked = 0
        self.diffs: List[str] = []

    def same(self, where: str, table, rescored) -> None:
        if isinstance(table, dict) and isinstance(rescored, dict):
            for key in table:
                if key in rescored:
                    self.same(f"{where}.{key}", table[key], rescored[key])
            return
        if isinstance(table, (list, tuple)) and isinstance(rescored, (list, tuple)):
            if len(table) != len(rescored):
                self.diffs.append(f"{where}: {len(table)} entries in the table, {len(rescored)} re-scored")
                return
            for i, (a, b) in enumerate(zip(table, rescored)):
                self.same(f"{where}[{i}]", a, b)
            return
        self.checked += 1
        if isinstance(table, bool) or isinstance(rescored, bool) or not (
                isinstance(table, (int, float)) and isinstance(rescored, (int, float))):
            if table != rescored:
                self.diffs.append(f"{where}: table {table!r}, re-scored {rescored!r}")
            return
        if not math.isclose(table, rescored, rel_tol=REL_TOL, abs_tol=1e-12):
            self.diffs.append(f"{where}: table {table!r}, re-scored {rescored!r}")


def table_tokenize(table: Dict) -> str:
    """The tokeniser the table was scored with: its own field, else its BLEU signature's ``tok:``, else
    sacreBLEU's default the tables use (13a)."""
    if table.get("tokenize"):
        return table["tokenize"]
    for sigs in (table.get("signature") or {}).values():
        m = re.search(r"\btok:([^|]+)", sigs.get("BLEU", ""))
        if m:
            return m.group(1)
    return "13a"


def _lines(path: str, what: str) -> list:
    return read_text_lines(path, what)


#: the metrics re-scored from the outputs alone (sacreBLEU's); COMET needs its checkpoint, AER the gold
#: alignments and the models' attention, neither of which is in the bundle
RESCORED_METRICS = ("bleu", "chrf", "ter")


def _check_metrics(where: str, metrics) -> None:
    other = [m for m in (metrics or []) if m not in RESCORED_METRICS]
    if other:
        raise BundleError(f"{where}: its {', '.join(other)} cells cannot be re-scored from the outputs alone "
                          f"(re-scored: {', '.join(RESCORED_METRICS)}); export a table without them")


def rescore_rows(table: Dict, cmp: Comparison, where: str) -> None:
    """The main table's rows (one seed: BLEU, deltas, p-values, marks, length ratio; seeds: the
    seeds table's per-seed scores, mean ± std, every pair's test and the all-pairs marks)."""
    _check_metrics(where, table["metrics"])
    refs = _lines(table["ref"], "reference")
    tok, bs, ar = table_tokenize(table), table["bs_samples"], table["ar_trials"]
    rows = table["rows"]
    if rows and "n_seeds" in rows[0]:
        systems = OrderedDict((r["system"], [(s, _lines(h, "system output")) for s, h in zip(r["seeds"], r["hyps"])])
                              for r in rows)
        scored = score_seeds(systems, refs, tok, bs, ar, metrics=table["metrics"])
        for r in rows:
            cmp.same(f"{where}.rows[{r['system']}]", r, scored["systems"][r["system"]])
        return
    sig = paired_tests(refs, [(r["system"], _lines(r["hyp"], "system output")) for r in rows], tok, bs, ar,
                       metrics=table["metrics"])
    for r, scored in zip(rows, score_rows(sig)):
        cmp.same(f"{where}.rows[{r['system']}]", r, scored)


def rescore_by_length(table: Dict, cmp: Comparison, where: str) -> None:
    """The by-length table: its buckets (edges again from the lengths with ``auto``) and their cells."""
    bl = table["by_length"]
    _check_metrics(where, bl["metrics"])
    refs = _lines(table["ref"], "reference")
    sources = _lines(table["src"], "source") if table.get("src") else None
    hyps = {r["system"]: r["hyp"] for r in table["rows"]}
    systems = [(n, _lines(hyps[n], "system output")) for n in bl["system_names"]]
    edges = "auto" if bl.get("edges_spec") == "auto" else bl["edges"]
    res = scores_by_length(refs, systems, sources, edges, bl["tokenize"], bl["bs_samples"], bl["ar_trials"],
                           metrics=bl["metrics"], train_max_len=bl.get("train_max_len"),
                           length_of=bl.get("length_of", "src"))
    cmp.same(f"{where}.by_length.edges", bl["edges"], res["edges"])
    cmp.same(f"{where}.by_length.buckets", bl["buckets"], res["buckets"])


def rescore_concat(concat: Dict, tokenize: str, cmp: Comparison, where: str, scratch: str) -> None:
    """Every k of the per-k table (the inputs' counts, each system's cells) and, where the table
    has them, the segment-by-segment rows (the k = 1 outputs joined by concat-test's groups)."""
    section = {"k": {}}
    for k, e in concat["k"].items():
        at = f"{where}.concat.k[{k}]"
        _check_metrics(at, e["metrics"])
        words = [len(line.split()) for line in _lines(e["src"], "source")]
        cmp.same(f"{at}.n", e["n"], len(words))
        cmp.same(f"{at}.mean_src_words", e["mean_src_words"], sum(words) / len(words))
        cmp.same(f"{at}.max_src_words", e["max_src_words"], max(words))
        refs = _lines(e["ref"], "reference")
        cells = e["systems"]
        tokenize = e.get("tokenize") or tokenize
        if max(len(c["seeds"]) for c in cells.values()) > 1:
            systems = OrderedDict((n, [(s, _lines(h, "system output")) for s, h in zip(c["seeds"], c["hyps"])])
                                  for n, c in cells.items())
            scored = score_seeds(systems, refs, tokenize, e["bs_samples"], e["ar_trials"], metrics=e["metrics"])
            rows = [{"system": n, "n_seeds": len(c["seeds"]), "seeds": c["seeds"], "hyps": c["hyps"],
                     **scored["systems"][n]} for n, c in cells.items()]
        else:
            sig = paired_tests(refs, [(n, _lines(c["hyps"][0], "system output")) for n, c in cells.items()],
                               tokenize, e["bs_samples"], e["ar_trials"], metrics=e["metrics"])
            rows = [{"system": n, "hyp": c["hyps"][0], "trained": {"seed": c["seeds"][0]}, **f}
                    for (n, c), f in zip(cells.items(), score_rows(sig))]
        again = by_concat.system_cells({"metrics": e["metrics"], "rows": rows})
        cmp.same(f"{at}.systems", list(cells), list(again))
        for n, c in cells.items():
            table_cell = {key: v for key, v in c.items() if key not in ("hyps", "segmentwise")}
            cmp.same(f"{at}.{n}", table_cell, again[n])
        section["k"][k] = dict(e, systems={n: dict(again[n], hyps=cells[n]["hyps"]) for n in cells})
    joined = [(k, n) for k, e in concat["k"].items() for n, c in e["systems"].items() if c.get("segmentwise")]
    if not joined:
        return
    if not concat.get("info"):
        cmp.diffs.append(f"{where}.concat: segment-by-segment rows not re-scored: the table names no concat-test "
                         f"record (info) of the groups")
        return
    with open(concat["info"], encoding="utf-8") as f:
        first = {k: v["first_lines"] for k, v in (json.load(f).get("k") or {}).items()}
    section["k"] = {k: e for k, e in section["k"].items() if k == "1" or any(k == j for j, _ in joined)}
    by_concat.add_segmentwise(section, first, os.path.join(scratch, "segmentwise"), tokenize)
    for k, n in joined:
        seg = {key: v for key, v in concat["k"][k]["systems"][n]["segmentwise"].items() if key != "hyps"}
        cmp.same(f"{where}.concat.k[{k}].{n}.segmentwise", seg, section["k"][k]["systems"][n]["segmentwise"])


def rescore_conditions(table: Dict, cmp: Comparison, where: str) -> None:
    """The difference of two training conditions, every seed pair tested again."""
    without, with_ = (load_table(table["studies"][side]) for side in ("without", "with"))
    diff = condition_difference(without["concat"], with_["concat"], table_tokenize(without))
    cmp.same(f"{where}.k", table["k"], diff["k"])


def rescore_curve(table: Dict, cmp: Comparison, where: str) -> None:
    """A learning curve (``curve.json``): each point's BLEU, chrF++ and length ratio per seed from its
    outputs, mean and std over seeds, and the order of the systems derived from them."""
    tok = table_tokenize(table)
    rescored = dict(table, rows=[])
    for r in table["rows"]:
        row = dict(r, k={})
        for k, cell in r["k"].items():
            per = [f and point_metrics(_lines(f["hyp"], "system output"), _lines(f["ref"], "reference"), tok)
                   for f in cell["files"]]
            row["k"][k] = point_stats(per)
            cmp.same(f"{where}.rows[{r['system']}, {r['condition']}, {r['updates']}].k[{k}]", cell, row["k"][k])
        rescored["rows"].append(row)
    if "ranking" in table:
        cmp.same(f"{where}.ranking", table["ranking"], ranking_table(rescored))


def rescore_figure2(table: Dict, cmp: Comparison, where: str) -> None:
    """Figure 2's points (``fairseq-attn-paper figure2 --json``): each seed's BLEU from its outputs, their
    mean and std."""
    from .curves import mean_std

    refs = _lines(table["ref"], "reference")
    tok = table_tokenize(table)
    points = [(f"{sweep}[{p['value']}]", p) for sweep in ("windows", "heads") for p in table.get(sweep) or []]
    if table.get("baseline"):  # scored by --baseline (its line)
        points.append(("baseline", table["baseline"]))
    for name, p in points:
        per = [point_metrics(_lines(h, "system output"), refs, tok)["bleu"] for h in p["hyps"]]
        mean, std = mean_std(per)
        cmp.same(f"{where}.{name}", {k: p[k] for k in ("bleu_per_seed", "bleu", "bleu_std")},
                 {"bleu_per_seed": per, "bleu": mean, "bleu_std": std if len(per) > 1 else None})
    if table.get("baseline"):
        cmp.same(f"{where}.baseline_bleu", table["baseline_bleu"], table["baseline"]["bleu"])


def rescore(table_path: str, scratch: Optional[str] = None) -> Comparison:
    """Every cell of the committed table at ``table_path`` against its bundle's outputs."""
    table_path = os.path.abspath(table_path)
    if not os.path.isfile(table_path):
        raise BundleError(f"{table_path}: no such table")
    own = scratch is None
    scratch = tempfile.mkdtemp(prefix="study-rescore.") if own else scratch
    try:
        files = os.path.join(scratch, "files")
        manifest, diffs = unpack(table_path, files)
        cmp = Comparison()
        cmp.diffs += diffs + check_committed(table_path, manifest)
        with open(table_path, encoding="utf-8") as f:
            table = resolved(json.load(f), os.path.join(files, *manifest["table_dir"].split("/")))
        where = os.path.basename(table_path)
        if "studies" in table:
            rescore_conditions(table, cmp, where)
        if "window_2d" in table:  # Figure 2
            rescore_figure2(table, cmp, where)
        if "points" in table:  # a learning curve: its rows are points, not a results table's systems
            rescore_curve(table, cmp, where)
        elif table.get("rows"):
            rescore_rows(table, cmp, where)
        if table.get("by_length"):
            rescore_by_length(table, cmp, where)
        if table.get("concat"):
            rescore_concat(table["concat"], table_tokenize(table), cmp, where, scratch)
        if not cmp.checked:
            raise BundleError(f"{table_path}: no scored table in it (rows, by_length, concat, a learning curve or "
                              f"the difference of two studies)")
        return cmp
    finally:
        if own:
            shutil.rmtree(scratch, ignore_errors=True)
