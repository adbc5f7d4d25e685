"""Attention probabilities as a reporting sees them (these need torch):

* :mod:`.attention_stats` -- per-head statistics of attention probabilities (entropy, Div,
  disagreement);
* :mod:`.attention_maps` -- the maps of one sentence (heatmaps), for ``fairseq-attn-plot``.

Results tables, significance, seeds, Table 1 and figures, and the reporting commands, are in
:mod:`fairseq_attn_reports` (no torch to start).
"""
