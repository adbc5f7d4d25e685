"""The reporting commands: argument parsing, then the modules of :mod:`fairseq_attn_reports`."""
