"""Console commands that need the model from the start (``fairseq-attn-bench``, ``-export``,
``-pieces``); the reporting commands are in :mod:`fairseq_attn_reports.cli`."""
