"""The Python steps of the shell recipes (recipes/lib/common.sh), by concern:

* :mod:`.corpora` -- script of each side, archives, aligned parts, extraction, cleaning;
* :mod:`.tokenisation` -- tokenisers, detokenisation, compound splitting;
* :mod:`.subwords` -- BPE (subword-nmt, sentencepiece);
* :mod:`.checkpoints` -- a run's save points by update number, averaging;
* :mod:`.scoring` -- hypotheses from fairseq-generate, the registry's metrics, tokenised BLEU
  (torch-free);
* :mod:`.fingerprints` -- what a step / data-bin is made from;
* :mod:`.preflight` -- the checks before any long work: the tools a recipe needs, the architecture it trains;
* :mod:`.position_limits` -- the model's position limits against the lengths it will read (``check-positions``);
* :mod:`.step_inputs` -- reading a step's inputs and arguments, its one-line error;
* :mod:`.recording` -- the run record kept around a training (fairseq's resolved config, the
  checkpoints saved); the record itself (``SAVE_DIR/run.json``: what a run is, its checkpoints
  and its per-subset evaluations) is :mod:`fairseq_attn_records.run_record`, read by the
  reporting commands too;
* :mod:`.train` -- fairseq-train with the run record (``python -m fairseq_attn_recipes.train``);
* :mod:`.profiles`, :mod:`.languages` -- the recipes' facts, one place each: model/training
  profiles (base, big, the bible preset, the toy sizes) and what a language is tokenised with,
  written in and counted on; :mod:`.fairseq_args` -- fairseq-train / -preprocess / -generate's
  argument lists;
* :mod:`.demo` -- ``fairseq-attn-demo``: the same steps on the embedded toy corpus.

Called by module, ``python -m fairseq_attn_recipes STEP ...`` (see ``__main__``),
so recipes work from any folder (paths with spaces included) and with the package installed
outside the checkout. A top-level package of the same distribution rather than a subpackage of
``fairseq_attn_plugins``: importing that one registers the models with fairseq (torch and
fairseq, seconds of CPU per call), which most steps (tokenising, fingerprints, scoring) do not
need; the steps that do (check-arch, average, training) import it themselves. The import
direction is one way: recipes -> fairseq_attn_plugins -> fairseq_attn_records (the torch-free
run record, metric registry and text readers), recipes -> fairseq_attn_records; never back up.
"""
