"""fairseq_attn_reports: from finished runs to the numbers a paper prints, without torch to start.

* :mod:`.results` -- one row per run (parameters, speed, BLEU, significance marks);
* :mod:`.significance` -- sacreBLEU's paired bootstrap / approximate randomisation, marks;
* :mod:`.seeds` -- several seeds per system (mean ± std, all-pairs significance);
* :mod:`.curves` -- learning curves from fairseq-train's json log;
* :mod:`.by_length`, :mod:`.by_concat` -- scores by input length, by concatenated documents;
* :mod:`.table1`, :mod:`.figures` -- the CSAN paper's Table 1 and Figures 2-3;
* :mod:`.runs` -- runs as the commands see them (identity from the run record);
* :mod:`.alignment_column`, :mod:`.alignment_evaluation` -- alignment error rates: the column of
  the results table, and what ``fairseq-attn-align`` does;
* :mod:`.cli` -- the command lines (``fairseq-attn-results``, ``-significance``, ``-plot``,
  ``-paper``, ``-align``), argument parsing only.

Importing any of them loads neither torch nor fairseq (a test checks): they build on
:mod:`fairseq_attn_records`, and import the plugin (:mod:`fairseq_attn_plugins`, the core
:mod:`fairseq_attn_core`) inside the functions that need a model or a checkpoint: a run
record's pieces (the pieces' declarations), the check of a record against its checkpoint,
Table 1's parameter counts, the attention maps of ``fairseq-attn-plot`` and the attention
alignments of ``fairseq-attn-align``. In the import layers the package sits above the plugin
and below the recipes.
"""
