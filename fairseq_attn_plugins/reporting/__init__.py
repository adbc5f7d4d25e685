"""Reporting: from finished runs to the numbers a paper prints.

* :mod:`.results` -- one row per run (parameters, speed, BLEU, significance marks);
* :mod:`.significance` -- sacreBLEU's paired bootstrap / approximate randomisation, marks;
* :mod:`.seeds` -- several seeds per system (mean ± std, all-pairs significance);
* :mod:`.curves` -- learning curves from fairseq-train's json log;
* :mod:`.table1`, :mod:`.figures` -- the CSAN paper's Table 1 and Figures 2-3;
* :mod:`.attention_stats`, :mod:`.attention_maps` -- per-head statistics of attention
  probabilities, and the maps of one sentence (heatmaps).

What they build on has no torch in it and lives in :mod:`fairseq_attn_records`: the run record,
the metric registry (labels, directions, digits, how each metric is scored), COMET, the
readers of text inputs and the one file writer (:mod:`fairseq_attn_records.output_files`).

The command lines (``fairseq-attn-results``, ``-significance``, ``-paper``, ``-plot``,
``-demo``) live in :mod:`fairseq_attn_plugins.cli`.
"""
