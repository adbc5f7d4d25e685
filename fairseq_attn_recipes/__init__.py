"""The Python steps of the shell recipes (recipes/lib/common.sh), by concern:

* :mod:`.corpora` -- script of each side, archives, aligned parts, extraction, cleaning;
* :mod:`.tokenisation` -- tokenisers, detokenisation, compound splitting;
* :mod:`.subwords` -- BPE (subword-nmt, sentencepiece);
* :mod:`.checkpoints` -- a run's save points by update number, averaging;
* :mod:`.scoring` -- hypotheses from fairseq-generate, sacreBLEU, tokenised BLEU;
* :mod:`.fingerprints` -- what a step / data-bin is made from;
* :mod:`.tools` -- tools and architecture checks.

Called by module, ``python -m fairseq_attn_recipes STEP ...`` (see ``__main__``),
so recipes work from any folder (paths with spaces included) and with the package installed
outside the checkout. A top-level package of the same distribution rather than a subpackage of
``fairseq_attn_plugins``: importing that one registers the models with fairseq (torch and
fairseq, seconds of CPU per call), which most steps (tokenising, fingerprints, scoring) do not
need; the steps that do (check-arch, average) import it themselves.
"""
