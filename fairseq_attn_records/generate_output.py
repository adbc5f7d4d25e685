"""The one reader of fairseq-generate's output: the hypotheses (``H-<id>\\t<score>\\t<text>``
lines) in test-set order."""

from typing import Dict, Iterable, List


def hypotheses(lines: Iterable[str]) -> Dict[int, str]:
    """``{sentence id: hypothesis}`` from fairseq-generate's output lines (an empty
    hypothesis is ``""``; line endings are dropped)."""
    out = {}
    for line in lines:
        if line.startswith("H-"):
            parts = line.rstrip("\r\n").split("\t", 2)
            out[int(parts[0][2:])] = parts[2] if len(parts) > 2 else ""
    return out


def ordered_hypotheses(lines: Iterable[str], n: int, source: str) -> List[str]:
    """The ``n`` hypotheses in test-set order; ValueError naming ``source`` when fairseq-generate
    did not translate every sentence once."""
    hyps = hypotheses(lines)
    if sorted(hyps) != list(range(n)):
        raise ValueError(f"{source}: {len(hyps)} hypotheses for a test set of {n} sentences")
    return [hyps[i] for i in range(n)]
