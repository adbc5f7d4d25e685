"""Reading the Markdown of README.md and docs/ (torch-free): the prose's sentences and paragraphs,
the command blocks, the links and the headings' anchors.

Prose is what lies outside fenced code blocks, tables (lines starting with ``|``), headings and
HTML comments. Paragraphs are separated by blank lines. A sentence ends at ``. ! ? : ;`` followed
by a space and a word that does not start in lower case (``e.g. the`` goes on), or where a list item
starts; inline code counts as one word; pieces of one or two words (a list item's label) are not
sentences.

``python tests/doc_markdown.py [FILE...]`` prints the figures of the files (default: the measured
ones) and of all of them together.
"""

import glob
import os
import re
import statistics
import sys
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r"^\s*(```|~~~)")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+(?=[^a-z\s])")

# the plain-language goals: README size and paragraph, docs paragraph, sentence median and 90th percentile
README_WORDS, README_PARAGRAPH, DOCS_PARAGRAPH = 1500, 120, 150
MEDIAN_SENTENCE, P90_SENTENCE = 18, 35


def docs_files(root: str = ROOT, leave_out=("docs/results/",)) -> List[str]:
    """README.md and docs/**/*.md, relative to root, docs/results/ left out (the studies' data)."""
    found = ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    return [f for f in found if not any(f.startswith(x) for x in leave_out)]


def blocks(text: str) -> List[Tuple[str, str, int]]:
    """The fenced code blocks: (info string, body, line number of the fence)."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            info, start, body = lines[i].strip()[3:].strip(), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(m.group(1)):
                body.append(lines[i])
                i += 1
            out.append((info, "\n".join(body), start))
        i += 1
    return out


def prose_lines(text: str) -> List[str]:
    """The lines of prose ('' between paragraphs): code blocks, tables, headings and HTML comments out."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    out, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence:
            if line.strip().startswith(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            out.append("")
            continue
        stripped = line.strip()
        if stripped.startswith(("|", "#")):
            continue
        out.append(stripped)
    return out


def paragraphs(text: str) -> List[List[str]]:
    """The paragraphs, each a list of its lines."""
    paras, current = [], []
    for line in prose_lines(text) + [""]:
        if line:
            current.append(line)
        elif current:
            paras.append(current)
            current = []
    return paras


def words(text: str) -> List[str]:
    return re.sub(r"`[^`]*`", "CODE", text).split()


def paragraph_words(paragraph: List[str]) -> int:
    """The words of a paragraph (inline code one word, list markers none)."""
    return len(words(" ".join(LIST_ITEM.sub("", line) for line in paragraph)))


def sentences(text: str) -> List[List[str]]:
    """The sentences of the prose, each as its words (inline code one word)."""
    out = []
    for para in paragraphs(text):
        items, current = [], []
        for line in para:
            if LIST_ITEM.match(line) and current:
                items.append(" ".join(current))
                current = []
            current.append(LIST_ITEM.sub("", line))
        items.append(" ".join(current))
        for item in items:
            item = re.sub(r"`[^`]*`", "CODE", item)
            out += [s.split() for s in SENTENCE_END.split(item) if len(s.split()) > 2]
    return out


def figures(text: str) -> Dict[str, float]:
    lengths = sorted(len(s) for s in sentences(text)) or [0]
    return {
        "words": len(text.split()),
        "sentences": len(lengths),
        "median": statistics.median(lengths),
        "p90": lengths[int(0.9 * (len(lengths) - 1))],
        "max_paragraph": max((paragraph_words(p) for p in paragraphs(text)), default=0),
    }


def read(path: str, root: str = ROOT) -> str:
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


if __name__ == "__main__":
    names = sys.argv[1:] or docs_files()
    texts = {n: read(n) for n in names}
    for n, t in texts.items():
        print(n, figures(t))
    print("ALL", figures("\n\n".join(texts.values())))
