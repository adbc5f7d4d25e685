"""Scoring: hypotheses in test-set order from fairseq-generate; sacreBLEU's BLEU and chrF++,
COMET when ``COMET_MODEL`` is set (:mod:`fairseq_attn_plugins.reporting.comet`), and the
tokenised BLEU the papers report."""

import json
import os

from . import manifest
from .files import die, read_lines, write_lines_atomic


def cmd_hyps(args):
    """fairseq-generate output -> hypotheses in test-set order."""
    hyps = {}
    for line in read_lines(args.input):
        if line.startswith("H-"):
            parts = line.split("\t")
            hyps[int(parts[0][2:])] = parts[2] if len(parts) > 2 else ""
    if sorted(hyps) != list(range(args.n)):
        die(f"{args.input}: {len(hyps)} hypotheses for a test set of {args.n} sentences")
    write_lines_atomic(args.output, [hyps[i] for i in range(args.n)])


def cmd_check_comet(args):
    """COMET_MODEL, when set, must load: checked before generation, one line if it does not."""
    from fairseq_attn_plugins.reporting import comet

    path = comet.model_path_from_env()
    if path is None:
        print(comet.ENABLE_HINT)
        return
    try:
        comet.load(path)
    except comet.CometError as e:
        die(str(e))
    print(f"COMET: {path} loads")


def cmd_score(args):
    from sacrebleu.metrics import BLEU

    from fairseq_attn_plugins.reporting import comet, metrics
    from fairseq_attn_plugins.reporting.text_inputs import check_aligned, read_text_lines

    scorer = None
    try:
        if comet.model_path_from_env():
            scorer = comet.load(comet.model_path_from_env())
            if not args.src:
                die("COMET_MODEL is set: the score step needs --src (the subset's source side)")
        hyp, ref = read_text_lines(args.hyp, "hypothesis"), read_text_lines(args.ref, "reference")
        check_aligned(args.ref, ref, args.hyp, hyp)
        metrics.check_tokenize(args.tokenize)
    except ValueError as e:  # CometError included: one line naming the file or setting
        die(str(e))
    bleu = BLEU(tokenize=args.tokenize)
    s = bleu.corpus_score(hyp, [ref])
    out = {"sacrebleu": round(s.score, 2), "signature": str(bleu.get_signature()), "sacrebleu_full": str(s),
           "hyp": os.path.abspath(args.hyp), "ref": os.path.abspath(args.ref)}
    chrf = metrics.corpus_scores(ref, hyp, ["chrf"])["chrf"]  # chrF++: sacreBLEU's chrF, word order 2
    out.update(chrf=round(chrf["score"], 2), chrf_signature=chrf["signature"], chrf_full=chrf["text"])
    if scorer is not None:
        src = read_text_lines(args.src, "source")
        check_aligned(args.ref, ref, args.src, src)
        segments = scorer.score_systems(src, ref, [hyp])[0]
        out.update(comet=sum(segments) / len(segments), comet_signature=scorer.signature(),
                   comet_segments=segments, src=os.path.abspath(args.src))
    if args.tok_hyp:
        # multi-bleu.perl on tokenised text: sacreBLEU's BLEU with tokenize=none
        tb = BLEU(tokenize="none", force=True)
        t = tb.corpus_score(read_lines(args.tok_hyp), [read_lines(args.tok_ref)])
        out["tokenized_bleu"] = round(t.score, 2)
        out["tokenized_bleu_method"] = args.tok_method
        out["tokenized_bleu_full"] = str(t)
        if "compound" in (args.tok_method or ""):
            out["tokenized_bleu_compound_split"] = out["tokenized_bleu"]
    for path in args.record or ():
        with open(path, encoding="utf-8") as f:
            out.update(json.load(f))
    out.update(json.loads(args.extra or "{}"))
    out["subset"] = args.subset
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2)
    os.replace(tmp, args.output)
    if args.run_dir:
        record_evaluation(args.run_dir, args.subset, out)
    print(json.dumps(out, indent=2))


def record_evaluation(run_dir: str, subset: str, scores: dict) -> None:
    """The evaluation of one subset in the run record: its outputs, the reference (path and
    sha256), the checkpoints averaged (by update) and the scores keyed by metric name."""
    try:
        rec = manifest.load(run_dir)
    except manifest.RecordError as e:
        die(str(e))
    if rec is None:
        die(f"{run_dir}: no run record (run.json): train the run with train.sh first (it records "
            f"a run it finds without one)")
    run_real = os.path.realpath(run_dir)
    rel = lambda path: os.path.relpath(os.path.realpath(path), run_real)
    metrics = {"bleu": {"score": scores["sacrebleu"], "signature": scores["signature"],
                        "full": scores["sacrebleu_full"]}}
    metrics["chrf"] = {"score": scores["chrf"], "signature": scores["chrf_signature"], "full": scores["chrf_full"]}
    if "comet" in scores:
        metrics["comet"] = {"score": scores["comet"], "signature": scores["comet_signature"],
                            "segments": scores["comet_segments"]}
    if "tokenized_bleu" in scores:
        metrics["tokenized_bleu"] = {"score": scores["tokenized_bleu"], "method": scores["tokenized_bleu_method"],
                                     "full": scores["tokenized_bleu_full"]}
    averaged = scores.get("averaged") or []
    rec.setdefault("evaluations", {})[subset] = {
        "dir": rel(os.path.dirname(scores["hyp"])), "hyp": rel(scores["hyp"]), "ref": scores["ref"],
        "ref_sha256": manifest.file_sha256(scores["ref"]), "averaged": averaged,
        "num_updates": max((a["num_updates"] for a in averaged), default=None),
        "beam": scores.get("beam"), "lenpen": scores.get("lenpen"), "scores": metrics,
        "evaluated": manifest.now(),
    }
    manifest.save(run_dir, rec)
