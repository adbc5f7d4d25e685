"""Table 1 of the CSAN paper (Yang et al., 2019): the one list of its rows.

Every command that reproduces Table 1 (``recipes/*/table1.sh``,
``fairseq-attn-paper table1``, ``fairseq-attn-demo --archs table1``) takes its
rows, their architectures and the paper's printed numbers from :data:`ROWS`.

The order is the paper's (baseline, Bi_Direct, Rel_Pos, Neighbor, Local_Hard,
Local_Soft, Block, Cnns, 1D-CSans, 2D-CSans). A row whose architecture is not
registered is never skipped silently: :func:`resolve_rows` fails naming it,
unless the rows are restricted (``--rows`` / ``ROWS=``).

:data:`EXTRA_ROWS` are the position baselines reviewers ask for beside the
paper's (``+ RoPE``, ``+ ALiBi``, ``+ T5 bias``), printed after the paper's rows
with "-" in the paper's columns: trained when listed (``--rows all,rope``,
``ROWS=all,rope,alibi,t5bias``), and rendered whenever their runs are present
(``table1 --rows all`` adds an extra row whose run directory holds train.log and
the translations of the reference its run record names: :func:`with_present_extras`).

Rendering (:func:`build_table`, :func:`format_markdown`) lays the table out as
the paper does -- Parameter (baseline absolute, others ``+x.xM``), Speed
(steps/s, others as the difference), BLEU, delta -- and adds the significance
marks of the package's paired tests (``fairseq_attn_reports.results.collect``,
sacreBLEU's bootstrap and approximate randomisation), each row's parameter
delta at Transformer-base size (the models built with their default settings)
and the paper's numbers beside ours.

Several seeds per row (:func:`build_seeds_table`, ``SEEDS="1 2 3"``): BLEU and chrF++ as mean ±
sample std over seeds, a row marked only when every pair of its seeds and the baseline's is
significant (:mod:`.seeds`, as ``fairseq-attn-results``), parameters measured in each run (one count
for all seeds) and steps per second as mean ± std over the seeds' trainings.
"""

import functools
import os
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_attn_records.metrics import DEFAULT_METRICS, digits

from .arch_names import registered_arch_names
from .curves import mean_std
from .results import collect, comparability_lines, parse_train_log, signature_lines
from .runs import Run, load_runs
from .seeds import collect_seeds, group_runs

BASELINE = "baseline"


@dataclass(frozen=True)
class Row:
    key: str             # name for --rows / ROWS=
    name: str            # as printed in the paper
    cite: str            # the paper's citation for the row ("" for the CSAN rows)
    arch: str            # the fairseq architecture that reproduces it
    paper_params: Optional[float]  # millions: absolute for the baseline, the increase otherwise
    paper_speed: Optional[float]   # steps/s: absolute for the baseline, the difference otherwise
    paper_bleu: Optional[float]    # WMT14 En-De newstest2014 (None: a row the paper does not have)

    @property
    def label(self) -> str:
        """The row's first cell as in the paper."""
        text = f"{self.name} {self.cite}".strip()
        return text if self.key == BASELINE else f"+ {text}"


# Yang et al. 2019, Table 1 (WMT14 En-De, Transformer-base, 8 P40 GPUs).
ROWS: Tuple[Row, ...] = (
    Row(BASELINE, "Transformer-Base", "Vaswani et al. (2017)", "transformer_attn_wmt_en_de", 88.0, 1.28, 27.31),
    Row("bi_direct", "Bi_Direct", "Shen et al. (2018a)", "transformer_bidirect_wmt_en_de", 0.0, -0.00, 27.58),
    Row("rel_pos", "Rel_Pos", "Shaw et al. (2018)", "transformer_relpos_wmt_en_de", 0.1, -0.11, 27.63),
    Row("neighbor", "Neighbor", "Sperber et al. (2018)", "transformer_neighbor_wmt_en_de", 0.4, -0.06, 27.60),
    Row("local_hard", "Local_Hard", "Luong et al. (2015)", "transformer_localhard_wmt_en_de", 0.4, -0.06, 27.73),
    Row("local_soft", "Local_Soft", "Yang et al. (2018)", "transformer_localsoft_wmt_en_de", 0.8, -0.09, 27.81),
    Row("block", "Block", "Shen et al. (2018b)", "transformer_block_wmt_en_de", 6.0, -0.33, 27.59),
    Row("cnns", "Cnns", "Yu et al. (2018)", "transformer_cnns_wmt_en_de", 42.6, -0.54, 27.70),
    Row("csan1d", "1D-CSans", "", "transformer_csan1d_wmt_en_de", 0.0, -0.00, 27.86),
    Row("csan2d", "2D-CSans", "", "transformer_csan2d_wmt_en_de", 0.0, -0.06, 28.18),
)
# Position baselines after the paper's rows (no paper numbers).
EXTRA_ROWS: Tuple[Row, ...] = (
    Row("rope", "RoPE", "Su et al. (2021)", "transformer_rope_wmt_en_de", None, None, None),
    Row("alibi", "ALiBi", "Press et al. (2022)", "transformer_alibi_wmt_en_de", None, None, None),
    Row("t5bias", "T5 bias", "Raffel et al. (2020)", "transformer_t5bias_wmt_en_de", None, None, None),
)
ROW_BY_KEY: Dict[str, Row] = {r.key: r for r in ROWS + EXTRA_ROWS}


class Table1Error(ValueError):
    pass


def registered_archs() -> List[str]:
    """fairseq's registry with the plugin's architectures (kept while the code is unchanged:
    :mod:`.arch_names`, so ``table1.sh`` checks its rows without starting torch and fairseq)."""
    return registered_arch_names()


def missing_rows(rows: Sequence[Row], registered: Optional[Sequence[str]] = None) -> List[Row]:
    """The rows whose architecture fairseq does not know."""
    known = set(registered_archs() if registered is None else registered)
    return [r for r in rows if r.arch not in known]


def resolve_rows(spec: str = "all", registered: Optional[Sequence[str]] = None) -> List[Row]:
    """``"all"`` (the paper's rows) or comma-separated row keys, ``all`` among them
    -> rows in the paper's order, then the extra rows.

    The baseline is always needed (every other column is relative to it). A row
    whose architecture is not registered is an error naming it.
    """
    if spec.strip() == "all":
        rows = list(ROWS)
    else:
        keys = [k.strip() for k in spec.split(",") if k.strip()]
        if "all" in keys:
            keys = [r.key for r in ROWS] + [k for k in keys if k != "all"]
        unknown = [k for k in keys if k not in ROW_BY_KEY]
        if unknown:
            raise Table1Error(f"--rows: unknown row(s) {', '.join(unknown)}; Table 1 rows are "
                              f"{', '.join(ROW_BY_KEY)} (or 'all', the paper's)")
        if len(keys) != len(set(keys)):
            raise Table1Error("--rows: a row is listed twice")
        if BASELINE not in keys:
            raise Table1Error(f"--rows: include '{BASELINE}' (every other column is relative to it)")
        if len(keys) < 2:
            raise Table1Error("--rows: give the baseline and at least one other row")
        rows = [r for r in ROWS + EXTRA_ROWS if r.key in keys]
    missing = missing_rows(rows, registered)
    if missing:
        present = [r.key for r in rows if r not in missing]
        raise Table1Error(
            "Table 1 row(s) without a registered architecture: "
            + ", ".join(f"{r.name} ({r.arch})" for r in missing)
            + ". Install the version of fairseq_attn_plugins that has them, or restrict the rows, "
            f"e.g. --rows {','.join(present)} (ROWS={','.join(present)} for the recipe)")
    return rows


# ---------------------------------------------------------------- parameters at base size
@functools.lru_cache(maxsize=None)
def base_size_params(arch: str, n_symbols: int = 1000) -> int:
    """Parameters of ``arch`` built with its own (Transformer-base) defaults, counted once per
    process (a 45M-parameter model takes about 0.5 s of CPU to build; a table counts each row,
    and the baseline again for every table). The global torch random state is left as it was.

    The vocabulary is a dummy one; the embeddings cancel out of the difference
    with the baseline built on the same vocabulary.
    """
    import torch

    from fairseq_attn_plugins.bench.systems import build_model, make_dictionary

    with torch.random.fork_rng(devices=[]):
        model = build_model(arch, make_dictionary(n_symbols), None, seed=0)
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- the table
def build_table(runs: Sequence[Tuple[Row, str]], ref_path: str, tokenize: str = "13a",
                bs_samples: int = 1000, ar_trials: int = 10000, base_size: bool = True,
                metrics: Sequence[str] = DEFAULT_METRICS, comet=None, src_path: Optional[str] = None,
                scorers=None) -> Dict:
    """``runs``: (row, run_dir) with the baseline first; each run_dir holds ``train.log`` and
    its translations (see :mod:`fairseq_attn_reports.results`). A run whose record
    says it trained another architecture than its row's is an error naming both.
    Beside BLEU: chrF++ (and COMET with ``comet``, any segment metric with ``scorers``), each with
    its delta and mark."""
    if not runs or runs[0][0].key != BASELINE:
        raise Table1Error("Table 1 needs the baseline run first")
    for (row, _), run in zip(runs, load_runs([d for _, d in runs])):  # the run record says what each run is
        run.expect(f"Table 1 row {row.key} ({row.name})", arch=row.arch)
    table = collect([(row.key, d) for row, d in runs], ref_path, tokenize, bs_samples, ar_trials,
                    metrics=metrics, comet=comet, src_path=src_path, scorers=scorers)
    base = table["rows"][0]
    base_full = base_size_params(runs[0][0].arch) if base_size else None
    out_rows = []
    for (row, _), r in zip(runs, table["rows"]):
        first = row.key == BASELINE
        full = (base_full if first else base_size_params(row.arch)) if base_size else None
        if r["params"] is None or r["train_ups"] is None:
            raise Table1Error(f"{row.key}: {r['run_dir']}/train.log has no parameter count or "
                              "training speed (is the training finished?)")
        out_rows.append(dict(
            r, key=row.key, label=row.label, arch=row.arch,
            params_delta=None if first else r["params"] - base["params"],
            speed_delta=None if first else r["train_ups"] - base["train_ups"],
            base_size_params=full,
            base_size_params_delta=None if (first or full is None) else full - base_full,
            paper=_paper(row),
        ))
    return {"baseline": base["system"], "ref": ref_path, "signature": table["signature"],
            "metrics": table["metrics"], "labels": table["labels"], "bs_samples": bs_samples,
            "ar_trials": ar_trials, "notes": table["notes"], "rows": out_rows,
            "comparability": table["comparability"]}


def build_seeds_table(runs: Sequence[Tuple[Row, Sequence[str]]], ref_path: str, tokenize: str = "13a",
                      bs_samples: int = 1000, ar_trials: int = 10000, base_size: bool = True,
                      metrics: Sequence[str] = DEFAULT_METRICS, comet=None, src_path: Optional[str] = None) -> Dict:
    """Table 1 over seeds: ``runs`` (row, the run folders of its seeds), the baseline first. Each row
    is :func:`.seeds.collect_seeds`'s (its ``system`` the row key; the all-pairs marks) with the
    parameters measured in its runs (``params``, the same in every seed), steps per second per seed
    (``train_ups_per_seed``; per epoch: ``train_ups_epochs_per_seed``), their mean and std (``train_ups``,
    ``train_ups_std``), the differences
    with the baseline's means and the paper's numbers."""
    if not runs or runs[0][0].key != BASELINE:
        raise Table1Error("Table 1 needs the baseline run first")
    flat = [(row, d) for row, dirs in runs for d in dirs]
    for (row, _), run in zip(flat, load_runs([d for _, d in flat])):  # the run record says what each run is
        run.expect(f"Table 1 row {row.key} ({row.name})", arch=row.arch)
    groups = group_runs([row.key for row, _ in flat], [d for _, d in flat])
    table = collect_seeds(groups, ref_path, tokenize, bs_samples, ar_trials, metrics=metrics, comet=comet,
                          src_path=src_path)
    base_full = base_size_params(runs[0][0].arch) if base_size else None
    out_rows = []
    for (row, _), r in zip(runs, table["rows"]):
        logs = [parse_train_log(os.path.join(d, "train.log")) for d in r["run_dirs"]]
        counts, ups = {lg["params"] for lg in logs}, [lg["train_ups"] for lg in logs]
        if None in counts or None in ups:
            raise Table1Error(f"{row.key}: a train.log of {', '.join(r['run_dirs'])} has no parameter count or "
                              "training speed (is the training finished?)")
        if len(counts) > 1:
            raise Table1Error(f"{row.key}: its seeds count {', '.join(map(str, sorted(counts)))} parameters: "
                              "not one model")
        first = row.key == BASELINE
        ups_mean, ups_std = mean_std(ups)
        if first:
            base_params, base_ups = r["params"], ups_mean
        full = (base_full if first else base_size_params(row.arch)) if base_size else None
        out_rows.append(dict(
            r, key=row.key, label=row.label, arch=row.arch, train_ups_per_seed=ups, train_ups=ups_mean,
            train_ups_epochs_per_seed=[[e["train_ups"] for e in lg["epochs"] if "train_ups" in e] for lg in logs],
            train_ups_std=ups_std if len(ups) > 1 else None,
            params_delta=None if first else r["params"] - base_params,
            speed_delta=None if first else ups_mean - base_ups,
            base_size_params=full, base_size_params_delta=None if (first or full is None) else full - base_full,
            paper=_paper(row)))
    return dict(table, rows=out_rows)


def _paper(row: Row) -> Dict:
    first = row.key == BASELINE
    return {"params": row.paper_params, "speed": row.paper_speed, "bleu": row.paper_bleu,
            "delta": None if first or row.paper_bleu is None else round(row.paper_bleu - ROWS[0].paper_bleu, 2)}


def _paper_cells(pp: Dict, first: bool) -> str:
    if pp["bleu"] is None:  # an extra row: not in the paper
        return "- | - | - | - |"
    return (f"{pp['params']:.1f}M | {pp['speed']:.2f} | {pp['bleu']:.2f} | -" if first else
            f"+{pp['params']:.1f}M | {pp['speed']:+.2f} | {pp['bleu']:.2f} | {pp['delta']:+.2f}") + " |"


def format_seeds_markdown(table: Dict) -> str:
    """Table 1 over seeds as the paper lays it out, each score mean ± std with the all-pairs mark."""
    keys = table.get("metrics", ["bleu"])
    labels = table.get("labels", {})
    out = ["| Model | Seeds | Parameter | Speed | steps/s (mean ± std) |"
           + "".join(f" {labels.get(k, k)} (mean ± std) | △ | pairs sig. |" for k in keys)
           + " Parameter, base size | paper: Parameter | Speed | BLEU | △ |",
           "|---|---:|---:|---:|---:|" + "---:|---:|---:|" * len(keys) + "---:|---:|---:|---:|---:|"]
    for r in table["rows"]:
        first = r["params_delta"] is None
        params = fmt_params(r["params"]) if first else fmt_params_delta(r["params_delta"])
        speed = f"{r['train_ups']:.2f}" if first else f"{r['speed_delta']:+.2f}"
        ups = f"{r['train_ups']:.2f}" + ("" if r["train_ups_std"] is None else f" ± {r['train_ups_std']:.2f}")
        cells = ""
        for k in keys:
            m, nd = r["metrics"][k], digits(k)
            std = "" if m["std"] is None else f" ± {m['std']:.{nd}f}"
            delta = "-" if m["delta"] is None else f"{m['delta']:+.{nd}f}"
            marked = "-" if m["pairs_marked"] is None else f"{m['pairs_marked']}/{len(m['pairs'])}"
            cells += f" {m['mean']:.{nd}f}{std}{mark_arrow(m['mark'], m['delta'])} | {delta} | {marked} |"
        if r["base_size_params"] is None:
            full = "-"
        else:
            full = fmt_params(r["base_size_params"]) if first else fmt_params_delta(r["base_size_params_delta"])
        dagger = (" †" if r.get("trained_differently") else "") + (" ‡" if r.get("stale") else "")
        out.append(f"| {r['label']}{dagger} | {r['n_seeds']} | {params} | {speed} | {ups} |{cells} {full} | "
                   + _paper_cells(r["paper"], first))
    out += ["",
            "Seeds: the runs of each row (their seeds: `seeds` of the JSON). Parameter: the parameters counted in the "
            "runs (baseline) and the increase over the baseline; Speed: training steps (updates) per second of the "
            "baseline, and each row's difference, means over seeds (fairseq's per-epoch averages of each run); "
            "△: the mean over the baseline's. ↑/⇑ after a score: better than the baseline with p < 0.05 / 0.01 in "
            f"both paired bootstrap resampling ({table.get('bs_samples', 1000)} resamples) and paired approximate "
            f"randomisation ({table.get('ar_trials', 10000)} trials) for EVERY pair of a seed of the row and a seed "
            "of the baseline (the weakest shown); 'pairs sig.' counts the pairs that are. Scores: mean ± sample "
            "standard deviation (n-1) over seeds. "]
    return _with_legend_and_notes(out, table)


def fmt_params_delta(n: int) -> str:
    """``+0.1M`` as the paper prints it; below 0.05M (toy models, Neighbor's scalars) in
    thousands, below 1000 exactly."""
    if n == 0 or abs(n) >= 50_000:
        return f"{n / 1e6:+.1f}M"
    return f"{n / 1e3:+.1f}K" if abs(n) >= 1000 else f"{n:+d}"


def fmt_params(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 50_000 else f"{n / 1e3:.1f}K"


def mark_arrow(mark: str, delta: Optional[float]) -> str:
    """The paper's marks: up arrows (p < 0.05 / 0.01) above the baseline, down arrows below."""
    if not mark or delta is None or delta == 0:
        return ""
    if delta > 0:
        return "⇑" if mark == "**" else "↑"
    return "⇓" if mark == "**" else "↓"


def format_markdown(table: Dict) -> str:
    # recipe runs (scores.json) also have the tokenised BLEU the paper reports
    tok = any(r.get("tok_bleu") is not None for r in table["rows"])
    more = [k for k in table.get("metrics", ["bleu"]) if k != "bleu"]  # chrF++, COMET...
    labels = table.get("labels", {})
    out = ["| Model | Parameter | Speed | BLEU | △ | p (bs / ar) |" + "".join(f" {labels[k]} | △ |" for k in more)
           + (" tok. BLEU | tok. △ |" if tok else "") + " Parameter, base size | paper: Parameter | Speed | BLEU | △ |",
           "|---|---:|---:|---:|---:|---:|" + "---:|---:|" * len(more) + ("---:|---:|" if tok else "")
           + "---:|---:|---:|---:|---:|"]
    base_tok = table["rows"][0].get("tok_bleu")
    for r in table["rows"]:
        first = r["params_delta"] is None
        pp = r["paper"]
        params = fmt_params(r["params"]) if first else fmt_params_delta(r["params_delta"])
        speed = f"{r['train_ups']:.2f}" if first else f"{r['speed_delta']:+.2f}"
        delta = "-" if first else f"{r['delta']:+.2f}"
        pvals = "-" if first else f"{r['p_bootstrap']:.4f} / {r['p_ar']:.4f}"
        if r["base_size_params"] is None:
            full = "-"
        else:
            full = fmt_params(r["base_size_params"]) if first else fmt_params_delta(r["base_size_params_delta"])
        if pp["bleu"] is None:  # an extra row: not in the paper
            p_params = p_speed = p_bleu = p_delta = "-"
        else:
            p_params = f"{pp['params']:.1f}M" if first else f"+{pp['params']:.1f}M"
            p_speed = f"{pp['speed']:.2f}" if first else f"{pp['speed']:+.2f}"
            p_bleu = f"{pp['bleu']:.2f}"
            p_delta = "-" if first else f"{pp['delta']:+.2f}"
        more_cells = ""
        for k in more:
            nd = digits(k)
            d = r["deltas"][k]
            more_cells += (f" {r['scores'][k]['score']:.{nd}f}{mark_arrow(r['marks'][k], d)} | "
                           f"{'-' if d is None else f'{d:+.{nd}f}'} |")
        tok_cells = ""
        if tok:
            t = r.get("tok_bleu")
            tok_cells = " ? | ? |" if t is None else f" {t:.2f} | " + (
                "- |" if first else ("? |" if base_tok is None else f"{t - base_tok:+.2f} |"))
        dagger = (" †" if r.get("trained_differently") else "") + (" ‡" if r.get("stale") else "")
        out.append(f"| {r['label']}{dagger} | {params} | {speed} | {r['bleu']:.2f}{mark_arrow(r['mark'], r['delta'])} "
                   f"| {delta} | {pvals} |{more_cells}{tok_cells} {full} | {p_params} | {p_speed} | {p_bleu} | {p_delta} |")
    out += ["",
            "Parameter: the model's parameters (baseline) and the increase over the baseline; Speed: "
            "training steps (updates) per second, and its difference; △: the metric over the baseline. "
            f"↑/⇑ after a score: better than the baseline on that metric with p < 0.05 / 0.01 in both paired "
            f"bootstrap resampling ({table.get('bs_samples', 1000)} resamples) and paired approximate "
            f"randomisation ({table.get('ar_trials', 10000)} trials), the same resamples for every metric "
            "(sacreBLEU's seed); an equal or worse system gets no arrow. "
            "BLEU and chrF++ (chrF, word order 2): detokenised sacreBLEU; COMET: mean segment score. "
            "tok. BLEU: the tokenised BLEU the paper reports (recipes' scores.json), without significance test. "]
    return _with_legend_and_notes(out, table)


def _with_legend_and_notes(out: List[str], table: Dict) -> str:
    """A rendered table: ``out`` (its rows, then its legend's own words last) with the words of the
    columns every layout has, then the runs' comparability, the metrics' signatures and the notes."""
    out[-1] += ("\"Parameter, base size\": each architecture built at Transformer-base size with its default "
                "settings. \"paper\": Yang et al. (2019), Table 1 (WMT14 En-De); \"-\" for rows it does not have.")
    return "\n".join(out + comparability_lines(table) + signature_lines(table["signature"]) + table.get("notes", []))


def run_dirs(rows: Sequence[Row], runs_dir: str, by: str = "key") -> List[Tuple[Row, str]]:
    """(row, runs_dir/<key or arch>) for each row."""
    return [(r, os.path.join(runs_dir, getattr(r, by))) for r in rows]


def with_present_extras(rows: Sequence[Row], runs_dir: str, ref: str, by: str = "key",
                        seeds: Sequence[str] = ()) -> List[Row]:
    """``rows`` plus each extra row not among them whose run is present: its folder holds train.log and
    the translations of ``ref`` its run record says it evaluated (:meth:`.runs.Run.hyp_for`: the
    recipes' ``test/hyp.txt``, the demo's ``hyp.txt``); with ``seeds``, the run of each seed. An extra
    run trained but without those translations is left out with a line on stderr saying why."""
    have, out = {r.key for r in rows}, list(rows)
    for r in EXTRA_ROWS:
        dirs = [os.path.join(runs_dir, getattr(r, by) + x) for x in [f"_seed{s}" for s in seeds] or [""]]
        if r.key in have or not all(os.path.isfile(os.path.join(d, "train.log")) for d in dirs):
            continue
        try:
            for d in dirs:
                Run(d).hyp_for(ref)
        except (FileNotFoundError, ValueError) as e:
            print(f"Table 1: the extra row {r.key} left out: {e}", file=sys.stderr)
            continue
        out.append(r)
    return out


def seed_run_dirs(rows: Sequence[Row], runs_dir: str, seeds: Sequence[str], by: str = "key") -> List[Tuple[Row, List[str]]]:
    """(row, [runs_dir/<key>_seed<N> for each seed]) for each row."""
    return [(r, [os.path.join(runs_dir, f"{getattr(r, by)}_seed{s}") for s in seeds]) for r in rows]
