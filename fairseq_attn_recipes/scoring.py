"""Scoring: hypotheses in test-set order from fairseq-generate; the corpus metrics of the
registry (sacreBLEU's BLEU and chrF++), COMET when ``COMET_MODEL`` is set, and the tokenised
BLEU the papers report. Imports neither torch nor fairseq (COMET loads torch when it is used).

``scores.json`` holds the evaluation as the run record does: ``"scores"`` keyed by metric name
(:func:`fairseq_attn_records.metrics.corpus_scores`' shape), equal to the run record's
``evaluations[subset]["scores"]``, beside the outputs scored and what the recipe adds (averaged
checkpoints, beam, data check)."""

import argparse
import json
import os

from fairseq_attn_records import comet, run_record
from fairseq_attn_records.generate_output import ordered_hypotheses
from fairseq_attn_records.text_inputs import check_aligned, read_text_lines
from fairseq_attn_records.output_files import write_json, write_lines

from .step_inputs import die, read_lines

# sacreBLEU (and numpy) are imported by the steps that score: every step starts from this
# module (``python -m fairseq_attn_recipes``), and check-tools must run where they are missing


def write_hyps(generate_out: str, n: int, output: str) -> None:
    """fairseq-generate output -> hypotheses in test-set order."""
    try:
        hyps = ordered_hypotheses(read_lines(generate_out), n, generate_out)
    except ValueError as e:
        die(str(e))
    write_lines(output, hyps)


def cmd_hyps(args):
    write_hyps(args.input, args.n, args.output)


def cmd_eval_text(args):
    """evaluate.sh's text steps in one process (sacremoses imported once): the hypotheses of
    fairseq-generate's output in test-set order (``hyps``), detokenised (``detok``); then, for the
    tokenised BLEU, the hypotheses and the reference tokenised (``tokenize --tool``) and their
    compounds split (``split-compounds``). Each file is written and read as the single steps do."""
    from .tokenisation import detok_file, split_compounds_files, tokenize_files

    if args.split_compounds and not args.tok_tool:
        die("--split-compounds needs --tok-tool (it splits the tokenised BLEU's files)")
    if args.generate_out:
        if not args.hyp_tok or args.n is None:
            die("--generate-out needs --n and --hyp-tok (the tokenised hypotheses it writes)")
        write_hyps(args.generate_out, args.n, args.hyp_tok)
        detok_file(args.lang, args.hyp_tok, args.hyp)
    if args.tok_tool:
        if not (args.ref and args.tok_hyp and args.tok_ref):
            die("--tok-tool needs --ref, --tok-hyp and --tok-ref")
        tokenize_files(args.lang, args.tok_tool, [args.hyp, args.tok_hyp, args.ref, args.tok_ref])
        if args.split_compounds:
            split_compounds_files([args.tok_hyp, args.tok_hyp, args.tok_ref, args.tok_ref])


def cmd_check_comet(args):
    """COMET_MODEL, when set, must load: checked before generation, one line if it does not."""
    path = comet.model_path_from_env()
    if path is None:
        print(comet.ENABLE_HINT)
        return
    try:
        comet.load(path)
    except comet.CometError as e:
        die(str(e))
    print(f"COMET: {path} loads")


def tokenized_bleu(tok_hyp: str, tok_ref: str, method: str) -> dict:
    """multi-bleu.perl on tokenised text: sacreBLEU's BLEU with tokenize=none."""
    from sacrebleu.metrics import BLEU

    tb = BLEU(tokenize="none", force=True)
    t = tb.corpus_score(read_lines(tok_hyp), [read_lines(tok_ref)])
    return {"score": round(t.score, 2), "method": method, "full": str(t),
            "compound_split": "compound" in (method or "")}


def text_field(spec: str):
    """``--text KEY=VALUE``: a string recorded in scores.json (argparse type)."""
    key, sep, value = spec.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{spec!r}: give KEY=VALUE")
    return key, value


def number_field(spec: str):
    """``--number KEY=VALUE``: a number recorded in scores.json (BEAM=4, LENPEN=0.6; argparse type)."""
    key, value = text_field(spec)
    try:
        number = json.loads(value)
    except ValueError:
        number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise argparse.ArgumentTypeError(f"{spec!r}: {key} must be a number")
    return key, number


def cmd_score(args):
    from fairseq_attn_records import metrics

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
    scores = metrics.corpus_scores(ref, hyp, metrics.DEFAULT_METRICS, args.tokenize)
    out = {"subset": args.subset, "hyp": os.path.abspath(args.hyp), "ref": os.path.abspath(args.ref)}
    if scorer is not None:
        src = read_text_lines(args.src, "source")
        check_aligned(args.ref, ref, args.src, src, what="source sentence")
        scores["comet"] = metrics.segment_score(scorer.score_systems(src, ref, [hyp])[0], scorer.signature())
        out["src"] = os.path.abspath(args.src)
    if args.tok_hyp:
        scores["tokenized_bleu"] = tokenized_bleu(args.tok_hyp, args.tok_ref, args.tok_method)
    for path in args.record or ():
        with open(path, encoding="utf-8") as f:
            out.update(json.load(f))
    out.update(args.fields or ())
    out["scores"] = scores
    out["hyp_sha256"] = run_record.file_sha256(args.hyp)  # what was scored: consumers check it
    staged = os.path.dirname(os.path.abspath(args.output))
    if args.publish:  # the outputs' final place: the file names they will have there
        if os.path.dirname(os.path.abspath(args.hyp)) != staged:
            die(f"--publish: --hyp {args.hyp} must be in the folder of --output {args.output}")
        out["hyp"] = os.path.join(os.path.abspath(args.publish), os.path.basename(args.hyp))
    write_json(args.output, out)
    try:
        if args.publish:
            run_record.publish_evaluation(staged, os.path.abspath(args.publish), args.run_dir, out)
        elif args.run_dir:
            run_record.record_evaluation(args.run_dir, out)
    except run_record.RecordError as e:
        die(str(e))
    where = os.path.join(os.path.abspath(args.publish), os.path.basename(args.output)) if args.publish else \
        os.path.abspath(args.output)
    print(summary(out, where))


def summary(out: dict, where: str) -> str:
    """What the score step prints (evaluate.sh's last lines): the subset's scores in one line,
    then where the whole evaluation is (``scores.json``: signatures, the settings, the
    checkpoints averaged, the data check and the hypotheses' sha256), e.g.
    ``test: BLEU 27.31, chrF++ 55.20, tokenised BLEU 28.02`` / ``full scores: .../scores.json``."""
    from fairseq_attn_records import metrics

    parts = [f"{metrics.label(key)} {cell['score']:.{metrics.digits(key)}f}"
             for key, cell in out["scores"].items() if key != "tokenized_bleu"]
    if "tokenized_bleu" in out["scores"]:
        parts.append(f"tokenised BLEU {out['scores']['tokenized_bleu']['score']:.2f}")
    return f"{out['subset']}: {', '.join(parts)}\nfull scores: {where}"


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("hyps"); p.add_argument("input"); p.add_argument("--n", type=int, required=True)
    p.add_argument("--output", required=True); p.set_defaults(fn=cmd_hyps)
    p = sub.add_parser("eval-text", help="evaluate.sh's text steps in one process: hyps, detok, and the "
                       "tokenised BLEU's tokenize and split-compounds")
    p.add_argument("--lang", required=True, help="the target language")
    p.add_argument("--hyp", required=True, help="the detokenised hypotheses (written from --generate-out, else read)")
    p.add_argument("--generate-out", help="fairseq-generate's output: its hypotheses written to --hyp-tok, then detokenised")
    p.add_argument("--n", type=int, help="the lines of the subset (with --generate-out)")
    p.add_argument("--hyp-tok")
    p.add_argument("--tok-tool", help="the tokeniser of the tokenised BLEU (moses-plain): --hyp and --ref tokenised")
    p.add_argument("--ref"); p.add_argument("--tok-hyp"); p.add_argument("--tok-ref")
    p.add_argument("--split-compounds", action="store_true", help="then their compounds split (en-de)")
    p.set_defaults(fn=cmd_eval_text)
    p = sub.add_parser("score"); p.add_argument("--hyp", required=True); p.add_argument("--ref", required=True)
    p.add_argument("--tokenize", default="13a"); p.add_argument("--tok-hyp"); p.add_argument("--tok-ref")
    p.add_argument("--tok-method", default="moses tokenizer.perl (no -a), multi-bleu.perl")
    p.add_argument("--record", action="append", help="JSON files merged into the scores")
    p.add_argument("--text", dest="fields", action="append", type=text_field, metavar="KEY=VALUE",
                   help="a string recorded in the scores (arch_requested=..., checkpoint=...)")
    p.add_argument("--number", dest="fields", action="append", type=number_field, metavar="KEY=VALUE",
                   help="a number recorded in the scores (beam=4, lenpen=0.6)")
    p.add_argument("--output", required=True)
    p.add_argument("--subset", default="test", help="the subset scored (recorded)")
    p.add_argument("--run-dir", help="record the evaluation in this run's run.json")
    p.add_argument("--publish", metavar="DIR", help="the outputs were written aside (the folder of --output, "
                   "--hyp in it): move that folder to DIR in one rename, then record the evaluation")
    p.add_argument("--src", help="source side of the subset (COMET reads it when COMET_MODEL is set)")
    p.set_defaults(fn=cmd_score)
    p = sub.add_parser("check-comet", help="COMET_MODEL, when set, loads (before any other work)")
    p.set_defaults(fn=cmd_check_comet)
