"""eflomal (Östling & Tiedemann 2016; ``pip install eflomal``), the statistical aligner beside
attention: fitted, as unsupervised aligners are used, on the training pairs and the scored split
together, both directions, symmetrised with grow-diag-final-and
(:func:`fairseq_attn_records.alignment.grow_diag_final_and`; eflomal ships no symmetriser), and
scored on the scored split only.

Its input is the raw words of the scored split (the gold's indices) and the words of the
training pairs as the data folder holds them (the binarised text, subwords joined and Moses
escapes undone); every word has the punctuation at its ends removed for the aligner (one word
stays one word, so the indices do not move; a word of punctuation only stays as it is), and
eflomal lowercases. eflomal samples with no seed option: a rerun differs slightly.
"""

import os
import tempfile
import unicodedata
from typing import Dict, List, Sequence

from fairseq_attn_records.alignment import Links, grow_diag_final_and, parse_pharaoh


def aligner_word(word: str) -> str:
    stripped = word
    while stripped and unicodedata.category(stripped[0]).startswith("P"):
        stripped = stripped[1:]
    while stripped and unicodedata.category(stripped[-1]).startswith("P"):
        stripped = stripped[:-1]
    return stripped or word


def aligner_line(line: str) -> str:
    return " ".join(aligner_word(w) for w in line.split())


def eflomal_alignments(train_src: Sequence[str], train_tgt: Sequence[str], src: Sequence[str],
                       tgt: Sequence[str]) -> Dict[str, List[Links]]:
    """{"forward", "reverse", "intersection", "grow-diag-final-and"}: the links of the lines
    ``src``/``tgt`` (source-target indices), fitted on the training lines and these."""
    try:
        import eflomal
    except ImportError:
        raise ValueError("eflomal is not installed: pip install eflomal==2.0.0 (scripts/setup_env.sh installs it)") from None
    n = len(src)
    s_all = [aligner_line(x) for x in (*train_src, *src)]
    t_all = [aligner_line(x) for x in (*train_tgt, *tgt)]
    with tempfile.TemporaryDirectory(prefix="eflomal.") as tmp:
        fwd, rev = os.path.join(tmp, "fwd"), os.path.join(tmp, "rev")
        eflomal.Aligner().align(s_all, t_all, links_filename_fwd=fwd, links_filename_rev=rev, quiet=True)
        out = {}
        for name, path in (("forward", fwd), ("reverse", rev)):
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")[:len(s_all)]
            if len(lines) != len(s_all):
                raise RuntimeError(f"eflomal wrote {len(lines)} {name} lines for {len(s_all)} sentence pairs")
            out[name] = [parse_pharaoh(x, f"eflomal {name} links line {k + 1}") for k, x in enumerate(lines[-n:])]
    out["intersection"] = [a & b for a, b in zip(out["forward"], out["reverse"])]
    out["grow-diag-final-and"] = [grow_diag_final_and(a, b) for a, b in zip(out["forward"], out["reverse"])]
    return out
