"""Plain sentences in README.md and docs/ (docs/results/ left out: the studies' reports and data),
counted by tests/doc_markdown.py: the README at most 1,500 words and no paragraph over 120; no
paragraph of docs over 150 words; over all the files, the median sentence at most 18 words and the
90th percentile at most 35.

``DOC_FILES="README.md docs/tutorial.md" pytest tests/test_docs_text.py`` measures those files
alone (the figures over all of them then hold for them alone).
"""

import os

import pytest

from doc_markdown import (DOCS_PARAGRAPH, MEDIAN_SENTENCE, P90_SENTENCE, README_PARAGRAPH, README_WORDS, docs_files,
                          figures, paragraph_words, paragraphs, read, sentences)

FILES = os.environ.get("DOC_FILES", "").split() or docs_files()


@pytest.mark.parametrize("path", FILES)
def test_no_paragraph_is_too_long(path):
    limit = README_PARAGRAPH if path == "README.md" else DOCS_PARAGRAPH
    long = [" ".join(p)[:80] for p in paragraphs(read(path)) if paragraph_words(p) > limit]
    assert long == [], f"{path}: paragraphs over {limit} words, starting: {long}"


def test_the_readme_is_short():
    if "README.md" not in FILES:
        pytest.skip("README.md not among DOC_FILES")
    assert figures(read("README.md"))["words"] <= README_WORDS


def test_sentences_are_plain_over_all_the_docs():
    together = figures("\n\n".join(read(p) for p in FILES))
    assert together["median"] <= MEDIAN_SENTENCE and together["p90"] <= P90_SENTENCE, together


def test_the_counting_follows_the_rule():
    """Sentences end at . ! ? : ; or a list item; inline code is one word; code blocks, tables,
    headings and comments are not prose; a lower-case word after a full stop goes on (e.g. this)."""
    text = "\n".join([
        "# A heading of five words",
        "",
        "One two three four. Five six `a b c` seven: Eight nine ten; eleven twelve thirteen.",
        "e.g. goes on here, as one sentence.",
        "",
        "- first item of four words",
        "- second item of five words",
        "",
        "| a table | of words |",
        "|---|---|",
        "",
        "```bash",
        "not prose at all here",
        "```",
        "<!-- hidden words here -->",
    ])
    got = [len(s) for s in sentences(text)]
    assert got == [4, 4, 13, 5, 5]
    assert [paragraph_words(p) for p in paragraphs(text)] == [21, 10]
    f = figures(text)
    assert (f["median"], f["p90"], f["max_paragraph"]) == (5, 5, 21)
