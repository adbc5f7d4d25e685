"""Gold word alignments of the bible corpus, in Pharaoh format, for any lines made of whole verses.

The ``bible-alignments`` package holds manual alignments of the SBLGNT Greek to the BSB English
(``data/eng/alignments/BSB/SBLGNT-BSB-manual.json``, CC-BY 4.0): each record maps a set of Greek
token ids (``nBBCCCVVVWWW``, rows of ``SBLGNT.tsv``) to a set of English token ids (rows of
``nt_BSB.tsv``); its links are the cross product of the two sets. Every link is **sure**: the
package has no sure/possible distinction, so AER against it is 1 - F1.

Indices are those of the whitespace-separated words of the corpus lines exactly as
:mod:`.bible` writes them: a Greek verse is its tokens joined by spaces, an English verse is the
tokens whose ``source_verse`` is that verse, each followed by a space unless
``skip_space_after``; a whitespace word made of several tokens (``Jesus`` + ``,``) is aligned
wherever any of its tokens is. A line may hold several verses (joined by a space, in order):
:func:`gold_lines` takes the verse ids of every line, whatever the split, and checks that the
line is those verses' words; a link between two verses is kept when both are on the line.
"""

import json
import re
from typing import Collection, Dict, List, Optional, Sequence, Set, Tuple

from fairseq_attn_records.output_files import write_lines

from .bible import PACKAGE, _rows, data_files, distribution, installed_file

ALIGNMENT_FILE = "data/eng/alignments/BSB/SBLGNT-BSB-manual.json"

def _spans(pieces: Sequence[Tuple[str, str, str]]) -> Tuple[Dict[str, List[int]], List[str]]:
    """pieces (token id, text, text after it) of one verse -> the words each token overlaps, and
    the verse's words (the non-space runs of the verse's text)."""
    text, starts = "", []
    for _, tok, after in pieces:
        starts.append(len(text))
        text += tok + after
    matches = list(re.finditer(r"\S+", text))
    runs = [m.span() for m in matches]
    out: Dict[str, List[int]] = {}
    first = 0  # the first word ending after the token's start (the tokens are in the text's order)
    for (tid, tok, _), start in zip(pieces, starts):
        end = start + len(tok)
        while first < len(runs) and runs[first][1] <= start:
            first += 1
        w = first
        out[tid] = []
        while tok.strip() and w < len(runs) and runs[w][0] < end:  # the words it overlaps
            out[tid].append(w)
            w += 1
    return out, [m.group() for m in matches]


class BibleGold:
    """The package's gold links as (verse, word) pairs, and each verse's words: of every verse, or of
    ``verses`` alone (a verse's links and words depend on its own tokens only)."""

    def __init__(self, source_tsv: str, target_tsv: str, alignment_json: str,
                 verses: Optional[Collection[str]] = None):
        self.src_words: Dict[str, List[str]] = {}  # verse -> its words
        self.tgt_words: Dict[str, List[str]] = {}
        src_of = self._words(source_tsv, lambda r: r["id"][1:9], lambda r: " ", self.src_words, verses)
        tgt_of = self._words(target_tsv, lambda r: r["source_verse"],
                             lambda r: "" if r["skip_space_after"] == "y" else " ", self.tgt_words, verses)
        with open(alignment_json, encoding="utf-8") as f:
            records = json.load(f)["records"]
        self.links: Set[Tuple[Tuple[str, int], Tuple[str, int]]] = set()
        for rec in records:
            for s in rec["source"]:
                for t in rec["target"]:
                    for sw in src_of.get(s, ()):
                        for tw in tgt_of.get(t, ()):
                            self.links.add((sw, tw))

    @staticmethod
    def _words(path, verse_of, after_of, counts, verses) -> Dict[str, List[Tuple[str, int]]]:
        by_verse: Dict[str, List[Tuple[str, str, str]]] = {}
        for row in _rows(path):
            verse = verse_of(row)
            if verses is None or verse in verses:
                by_verse.setdefault(verse, []).append((row["id"], row["text"], after_of(row)))
        out: Dict[str, List[Tuple[str, int]]] = {}
        for verse, pieces in by_verse.items():
            words, counts[verse] = _spans(pieces)
            for tid, ws in words.items():
                out[tid] = [(verse, w) for w in ws]
        return out

    def by_line(self) -> Dict[Tuple[str, str], Set[Tuple[int, int]]]:
        """{(source verse, target verse): {(source word, target word)}}."""
        out: Dict[Tuple[str, str], Set[Tuple[int, int]]] = {}
        for (sv, si), (tv, ti) in self.links:
            out.setdefault((sv, tv), set()).add((si, ti))
        return out


def package_files() -> Tuple[str, str, str]:
    """(SBLGNT.tsv, nt_BSB.tsv, the alignment json) of the installed package, or a one-line error."""
    sblgnt, bsb, _ = data_files()  # where the package is (its data home) and its token files
    return sblgnt, bsb, installed_file(distribution(), ALIGNMENT_FILE)


def gold_lines(gold: BibleGold, verses_of_lines: Sequence[Sequence[str]], src_lines: Sequence[str],
               tgt_lines: Sequence[str], where: str = "") -> List[str]:
    """The Pharaoh line of every corpus line; ``verses_of_lines[n]``: the verse ids line n is
    made of, in order. A line that is not those verses' words is an error naming it."""
    if not (len(verses_of_lines) == len(src_lines) == len(tgt_lines)):
        raise ValueError(f"{where}: {len(verses_of_lines)} verse lists, {len(src_lines)} source and "
                         f"{len(tgt_lines)} target lines")
    per_pair = gold.by_line()
    out = []
    for n, (verses, src, tgt) in enumerate(zip(verses_of_lines, src_lines, tgt_lines), 1):
        s_off, t_off, s_n, t_n = {}, {}, 0, 0
        for v in verses:
            if v not in gold.src_words or v not in gold.tgt_words:
                raise ValueError(f"{where} line {n}: verse {v} is not in both token files of {PACKAGE}")
            s_off[v], t_off[v] = s_n, t_n
            s_n += len(gold.src_words[v])
            t_n += len(gold.tgt_words[v])
        for side, line, of in (("source", src, gold.src_words), ("target", tgt, gold.tgt_words)):
            if line.split() != [w for v in verses for w in of[v]]:
                raise ValueError(f"{where} line {n}: the {side} line is not the words of verse(s) "
                                 f"{','.join(verses)} of {PACKAGE}")
        links = {(s_off[sv] + si, t_off[tv] + ti)
                 for sv in verses for tv in verses for si, ti in per_pair.get((sv, tv), ())}
        out.append(" ".join(f"{i}-{j}" for i, j in sorted(links)))
    return out


def write_gold(path: str, verses_of_lines: Sequence[Sequence[str]], src_lines: Sequence[str],
               tgt_lines: Sequence[str], gold: BibleGold = None) -> None:
    """``path``: the Pharaoh gold of the lines (written aside, then renamed)."""
    gold = gold or BibleGold(*package_files())
    write_lines(path, gold_lines(gold, verses_of_lines, src_lines, tgt_lines, path))
