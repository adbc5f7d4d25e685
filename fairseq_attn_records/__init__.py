"""fairseq_attn_records: what a run is and how its outputs are scored, without torch or fairseq.

* :mod:`.run_record` -- the run record (``SAVE_DIR/run.json``): layout, reading and writing,
  identity and differences, save points, evaluations;
* :mod:`.metrics` -- the metric registry (one row per metric) and the paired tests;
* :mod:`.comet` -- the COMET scorer (a segment metric; loads torch only when used);
* :mod:`.text_inputs` -- the one reader of references and system outputs;
* :mod:`.generate_output` -- the one reader of fairseq-generate's output;
* :mod:`.output_files` -- the one writer of files: aside, then renamed (and output folders checked);
* :mod:`.fairseq_import` -- how this distribution's commands import fairseq (when they need it):
  without scikit-learn and scipy.stats, which translation never calls.

The bottom layer of the distribution: the recipe steps (:mod:`fairseq_attn_recipes`) and the
reporting (:mod:`fairseq_attn_reports`) import it; it imports neither of them, so the
scoring step starts without torch and fairseq.
"""
