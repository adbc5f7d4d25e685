"""Word alignments: Pharaoh files, the alignment error rate, grow-diag-final-and, paired tests.

Torch-free (read by the results table, the recipes and ``fairseq-attn-align``).

* **Pharaoh format**: one line per sentence pair, ``i-j`` pairs separated by spaces, ``i`` the
  0-based index of a whitespace-separated source word, ``j`` of a target word. An empty line is a
  sentence without links. :func:`read_pharaoh` checks a file against its sentences (line count,
  every index inside its sentence) and names the first bad line.
* **AER** (Och & Ney 2003) with sure links S, possible links P and predicted links A:
  ``1 - (|A & S| + |A & P|) / (|A| + |S|)``. The gold here has one set G (every link sure:
  S = P = G), so AER = ``1 - 2 |A & G| / (|A| + |G|)`` = 1 - F1; precision ``|A & G| / |A|``,
  recall ``|A & G| / |G|``, all three in percent. The counts are summed over the corpus before dividing (not a mean of
  sentence AERs).
* **Paired tests** (:func:`paired_aer_tests`): bootstrap resampling and approximate
  randomisation over sentences with the very draws sacreBLEU makes for the same seed and
  sentence count (:func:`fairseq_attn_records.metrics.bootstrap_indices`), as every other metric
  of the tables, on the sufficient statistics ``(2 |A & G|, |A| + |G|)`` per sentence.
"""

from __future__ import annotations  # (np.ndarray in signatures: numpy is imported by the functions using it)

import os
from typing import TYPE_CHECKING, Dict, Iterable, List, Sequence, Set, Tuple

if TYPE_CHECKING:
    import numpy as np

from .output_files import write_lines

Links = Set[Tuple[int, int]]


class AlignmentError(ValueError):
    """Bad alignment input: the message names the file, the line and what is wrong."""


def parse_pharaoh(line: str, where: str = "") -> Links:
    links = set()
    for pair in line.split():
        i, sep, j = pair.partition("-")
        if not sep or not i.isdigit() or not j.isdigit():
            raise AlignmentError(f"{where}: {pair!r} is not an i-j pair of 0-based word indices")
        links.add((int(i), int(j)))
    return links


def format_pharaoh(links: Iterable[Tuple[int, int]]) -> str:
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def words(line: str) -> List[str]:
    return line.split()


def check_links(links: Links, n_src: int, n_tgt: int, where: str) -> None:
    for i, j in sorted(links):
        if i >= n_src or j >= n_tgt:
            raise AlignmentError(f"{where}: link {i}-{j} is outside the sentence pair "
                                 f"({n_src} source words, {n_tgt} target words)")


def read_pharaoh(path: str, src_lines: Sequence[str], tgt_lines: Sequence[str]) -> List[Links]:
    """The links of every line of ``path``, checked against the sentences (one line each)."""
    if not os.path.isfile(path):
        raise AlignmentError(f"{path}: no such alignment file")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(src_lines):
        raise AlignmentError(f"{path}: {len(lines)} lines but the sentences are {len(src_lines)}")
    out = []
    for n, (line, s, t) in enumerate(zip(lines, src_lines, tgt_lines), 1):
        links = parse_pharaoh(line, f"{path} line {n}")
        check_links(links, len(words(s)), len(words(t)), f"{path} line {n}")
        out.append(links)
    return out


def write_pharaoh(path: str, alignments: Sequence[Links]) -> None:
    """Written aside and renamed: a stopped run leaves no half file under the final name."""
    write_lines(path, (format_pharaoh(links) for links in alignments))


# -- scores ---------------------------------------------------------------------------------

def sentence_stats(pred: Sequence[Links], gold: Sequence[Links]) -> np.ndarray:
    """(n, 3) int64: |A & G|, |A|, |G| per sentence."""
    import numpy as np

    if len(pred) != len(gold):
        raise AlignmentError(f"{len(pred)} predicted sentences but {len(gold)} gold ones")
    return np.array([[len(a & g), len(a), len(g)] for a, g in zip(pred, gold)], dtype=np.int64).reshape(-1, 3)


def scores_of_stats(stats: np.ndarray) -> Dict[str, float]:
    hit, n_pred, n_gold = (int(v) for v in stats.sum(axis=0))
    return {"aer": 100.0 * (1.0 - (2.0 * hit / (n_pred + n_gold) if n_pred + n_gold else 0.0)),
            "precision": 100.0 * hit / n_pred if n_pred else 0.0,
            "recall": 100.0 * hit / n_gold if n_gold else 0.0,
            "links": n_pred, "gold_links": n_gold, "correct": hit}


def aer_scores(pred: Sequence[Links], gold: Sequence[Links]) -> Dict[str, float]:
    """``{"aer", "precision", "recall"}`` in percent over the corpus, and the link counts
    ``links`` (|A|), ``gold_links`` (|G|), ``correct`` (|A & G|)."""
    return scores_of_stats(sentence_stats(pred, gold))


def paired_aer_tests(gold: Sequence[Links], systems: Sequence[Tuple[str, Sequence[Links]]],
                     bs_samples: int = 1000, ar_trials: int = 10000) -> List[Dict]:
    """Paired bootstrap and approximate randomisation of AER; ``systems[0]`` is the baseline.

    One dict per system as a cell of the main table's tests (``score`` is the AER in percent;
    ``bs_mean`` and ``bs_ci`` of the AER; p-values of the difference to the baseline, which are those of F1:
    AER = 1 - F1). The draws are sacreBLEU's for the seed and sentence count."""
    import numpy as np

    from .metrics import ratio_paired_tests

    ratios = []
    for _, pred in systems:
        st = sentence_stats(pred, gold).astype(np.float64)
        ratios.append(np.stack([2.0 * st[:, 0], st[:, 1] + st[:, 2]], axis=1))
    cells = ratio_paired_tests(ratios, bs_samples, ar_trials)
    for cell in cells:  # F1 -> AER in percent
        cell["score"] = 100.0 * (1.0 - cell["score"])
        cell["bs_mean"] = 100.0 * (1.0 - cell["bs_mean"])
        cell["bs_ci"] = 100.0 * cell["bs_ci"]
    return cells


# -- symmetrisation -------------------------------------------------------------------------

_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def grow_diag_final_and(forward: Links, reverse: Links) -> Links:
    """Koehn et al.'s grow-diag-final-and of two directional alignments, both given as
    (source index, target index) links: start from the intersection, add union links next to a
    link (also diagonally) whose source or target word is still unaligned, until nothing
    changes; then ("final-and") add each remaining directional link whose source and target
    words are both unaligned (forward links first, then reverse). The growing visits the links
    in sorted order and repeats until a pass adds nothing (Moses visits its matrix in index
    order within a pass; the fixed point reached can differ in rare ties)."""
    union = forward | reverse
    links = set(forward & reverse)
    src_done = {i for i, _ in links}
    tgt_done = {j for _, j in links}
    added = True
    while added:
        added = False
        for i, j in sorted(links):
            for di, dj in _NEIGHBOURS:
                cand = (i + di, j + dj)
                if cand in union and cand not in links and (cand[0] not in src_done or cand[1] not in tgt_done):
                    links.add(cand)
                    src_done.add(cand[0])
                    tgt_done.add(cand[1])
                    added = True
    for direction in (forward, reverse):
        for i, j in sorted(direction):
            if i not in src_done and j not in tgt_done:
                links.add((i, j))
                src_done.add(i)
                tgt_done.add(j)
    return links
