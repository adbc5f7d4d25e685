"""Which whitespace word of a text line each model token belongs to.

The model reads tokenised, subword-split text (Moses escapes, ``@@`` continuations or
sentencepiece's ``▁``); the gold indexes the words of the raw line. The tokens' characters
(markers removed, escapes undone) are matched to the line's characters (``difflib``, no junk
heuristic) and a token belongs to the word most of its matched characters lie in. A token with
no matched character (``<unk>``, a character the tokeniser rewrote) takes the next word no token
claims after the previous token's word, else the previous token's word.
"""

import difflib
import html
from typing import List, Sequence


def token_text(piece: str) -> str:
    return html.unescape(piece.replace("@@", "").replace("\u2581", ""))


def word_of_tokens(pieces: Sequence[str], line: str) -> List[int]:
    """For each piece, the index of the whitespace word of ``line`` it belongs to."""
    raw, raw_word = [], []
    for w, word in enumerate(line.split()):
        raw.extend(word)
        raw_word.extend([w] * len(word))
    tok, tok_of = [], []
    for k, piece in enumerate(pieces):
        text = "".join(token_text(piece).split())
        tok.extend(text)
        tok_of.extend([k] * len(text))
    votes = [dict() for _ in pieces]
    matcher = difflib.SequenceMatcher(None, tok, raw, autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        for d in range(size):
            v = votes[tok_of[a + d]]
            w = raw_word[b + d]
            v[w] = v.get(w, 0) + 1
    words = [max(v, key=lambda w: (v[w], -w)) if v else None for v in votes]
    claimed = {w for w in words if w is not None}
    n_words = len(line.split())
    prev = -1
    for k, w in enumerate(words):
        if w is None:
            nxt = prev + 1
            w = nxt if nxt < n_words and nxt not in claimed else max(prev, 0)
            words[k] = w
            claimed.add(w)
        prev = w
    return words
