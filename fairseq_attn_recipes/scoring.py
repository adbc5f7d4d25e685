"""Scoring: hypotheses in test-set order from fairseq-generate, sacreBLEU and tokenised BLEU."""

import json
import os

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


def cmd_score(args):
    from sacrebleu.metrics import BLEU
    hyp, ref = read_lines(args.hyp), read_lines(args.ref)
    if len(hyp) != len(ref):
        die(f"{args.hyp}: {len(hyp)} lines, reference {args.ref}: {len(ref)}")
    bleu = BLEU(tokenize=args.tokenize)
    s = bleu.corpus_score(hyp, [ref])
    out = {"sacrebleu": round(s.score, 2), "signature": str(bleu.get_signature()), "sacrebleu_full": str(s),
           "hyp": os.path.abspath(args.hyp), "ref": os.path.abspath(args.ref)}
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
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2)
    os.replace(tmp, args.output)
    print(json.dumps(out, indent=2))
