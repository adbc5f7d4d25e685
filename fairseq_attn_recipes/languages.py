"""What the recipes know of a language, in one place: its tokeniser, the script its text is
written in, and whether its words are separated by spaces.

Chinese and Japanese are written without spaces between words: their words are counted on the
tokeniser's output (the TRAIN_MAX_LEN cap, the by-length tables of lengths.sh), their tokenised
output is joined back without a detokeniser, and jieba / MeCab tokenise them. Every other
language is tokenised with Moses and counted on its raw text. ``language-facts SRC TGT`` gives
these facts to the shell recipes (recipes/lib/common.sh: ``tokenizer_tool``, ``words_counted_on``).
"""

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class Language:
    tokenizer: str = "moses"  # the default tool of the tokenize step (TOKENIZER_<LANG> overrides it)
    script: str = "latin"     # what check-script expects most letters of a sample to be
    spaced: bool = True       # words separated by spaces: counted on the raw text


LANGUAGES = {
    "zh": Language(tokenizer="jieba", script="han", spaced=False),
    "ja": Language(tokenizer="mecab", script="japanese", spaced=False),
    "ko": Language(script="hangul"),
    "el": Language(script="greek"),
    "grc": Language(script="greek"),
}


def language(code: str) -> Language:
    """The facts of a language code; one not listed is a Latin-script, Moses-tokenised language."""
    return LANGUAGES.get(code, Language())


def words_counted_on(code: str) -> str:
    """``raw`` (the words of the raw text) or ``tokenised`` (of the tokeniser's output)."""
    return "raw" if language(code).spaced else "tokenised"


def shell_facts(codes) -> str:
    """The facts of ``codes`` as bash associative arrays, for ``eval`` by recipes/lib/common.sh."""
    tok = " ".join(f"[{c}]={shlex.quote(language(c).tokenizer)}" for c in codes)
    words = " ".join(f"[{c}]={words_counted_on(c)}" for c in codes)
    return f"declare -gA LANG_TOKENIZER=({tok}) LANG_WORDS_OF=({words})"


def cmd_language_facts(args):
    print(shell_facts(args.langs))


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("language-facts", help="tokeniser and word counting of languages, as bash arrays")
    p.add_argument("langs", nargs="+"); p.set_defaults(fn=cmd_language_facts)
