"""evaluate.sh's last lines: the score step prints the scores in one line and where the whole
evaluation is (scores.json), not the ~110 lines of scores.json."""

import json
import os

import sacrebleu

from fairseq_attn_recipes.__main__ import main as steps

REFS = ["the cat sat on the mat .", "a dog barks at night .", "we read the long book together ."]
HYPS = ["the cat sat on a mat .", "a dog barks at the night .", "we read a long book ."]


def test_the_score_step_prints_the_scores_and_where_the_file_is(tmp_path, capsys):
    staged, final = tmp_path / "test.tmp", tmp_path / "test"
    staged.mkdir()
    ref, hyp = tmp_path / "ref.txt", staged / "hyp.txt"
    ref.write_text("\n".join(REFS) + "\n")
    hyp.write_text("\n".join(HYPS) + "\n")
    steps(["score", "--hyp", str(hyp), "--ref", str(ref), "--tok-hyp", str(hyp), "--tok-ref", str(ref),
           "--subset", "test", "--output", str(staged / "scores.json"), "--publish", str(final)])
    bleu = sacrebleu.corpus_bleu(HYPS, [REFS]).score
    chrf = sacrebleu.metrics.CHRF(word_order=2).corpus_score(HYPS, [REFS]).score
    tok = sacrebleu.metrics.BLEU(tokenize="none", force=True).corpus_score(HYPS, [REFS]).score
    assert capsys.readouterr().out == (f"test: BLEU {bleu:.2f}, chrF++ {chrf:.2f}, tokenised BLEU {tok:.2f}\n"
                                       f"full scores: {final / 'scores.json'}\n")
    scores = json.loads((final / "scores.json").read_text())["scores"]  # the file holds them whole
    assert scores["bleu"]["score"] == round(bleu, 2) and "nrefs:1" in scores["bleu"]["signature"]
    assert not os.path.exists(staged)
