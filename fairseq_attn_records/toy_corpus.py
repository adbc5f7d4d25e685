"""An embedded, generated parallel corpus for offline demos and tests.

The synthetic language pair needs what the attention variants are about:

* local reordering: source "ADJ NOUN" becomes target "NOUN' ADJ'", and a
  sentence-final source verb moves right after the subject in the target;
* agreement: the target verb and adjectives take a suffix that depends on the
  number (singular/plural marker) of their noun; the verb agrees with the subject,
  which the verb-final source places far away;
* prepositional phrases: source "NOUN PREP NP" becomes target "NOUN' NP' PREP'"
  (postpositions), which nests the reorderings.

Everything is derived from a seed, so the corpus is identical everywhere.
"""

import os
import random
from typing import List, Tuple

from .output_files import write_lines

_NOUNS = ["kat", "hund", "baum", "haus", "stern", "fisch", "vogel", "berg", "fluss", "stein",
          "wolke", "blume", "wald", "tisch", "buch", "licht", "garten", "strasse", "fenster",
          "wagen", "apfel", "brief", "schiff", "turm"]
_ADJS = ["rot", "gross", "klein", "alt", "neu", "hell", "dunkel", "schnell", "leise", "warm",
         "kalt", "gruen", "blau", "weich"]
_VERBS = ["sieht", "findet", "malt", "hoert", "sucht", "kennt", "baut", "traegt", "bringt",
          "zeigt", "holt", "liebt"]
_PREPS = ["mit", "ohne", "unter", "neben"]


def _translate_word(word: str) -> str:
    # a fixed, invertible "lexicon": reverse the letters and mark the class
    return word[::-1]


def make_pair(rng: random.Random) -> Tuple[str, str]:
    """One source/target sentence pair."""

    def noun_phrase(allow_pp=True):
        plural = rng.random() < 0.5
        adjs = [rng.choice(_ADJS) for _ in range(rng.randint(0, 2))]
        noun = rng.choice(_NOUNS)
        src = adjs + [noun + ("_pl" if plural else "")]
        tgt = [_translate_word(noun) + ("s" if plural else "")]
        tgt += [_translate_word(a) + ("-e" if plural else "-a") for a in adjs]
        if allow_pp and rng.random() < 0.3:
            prep = rng.choice(_PREPS)
            pp_src, pp_tgt, _ = noun_phrase(allow_pp=False)
            src += [prep] + pp_src
            tgt += pp_tgt + [_translate_word(prep)]
        return src, tgt, plural

    subj_src, subj_tgt, subj_pl = noun_phrase()
    obj_src, obj_tgt, _ = noun_phrase()
    verb = rng.choice(_VERBS)
    src = subj_src + obj_src + [verb]  # verb-final source
    tgt = subj_tgt + [_translate_word(verb) + ("-n" if subj_pl else "-t")] + obj_tgt  # SVO target
    return " ".join(src), " ".join(tgt)


def make_corpus(n: int, seed: int = 0) -> List[Tuple[str, str]]:
    rng = random.Random(seed)
    return [make_pair(rng) for _ in range(n)]


def write_corpus(out_dir: str, src: str = "src", tgt: str = "tgt",
                 sizes=(("train", 2000), ("valid", 100), ("test", 100)), seed: int = 0) -> str:
    """Write ``{split}.{src|tgt}`` text files under ``out_dir``; returns ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    for i, (split, n) in enumerate(sizes):
        pairs = make_corpus(n, seed=seed * 1000 + i)
        for lang, col in ((src, 0), (tgt, 1)):
            path = os.path.join(out_dir, f"{split}.{lang}")
            write_lines(path, (p[col] for p in pairs))
    return out_dir
