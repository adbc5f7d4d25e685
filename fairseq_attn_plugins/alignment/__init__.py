"""Attention as word alignment: cross-attention of a trained model against gold alignments
(``fairseq-attn-align``, :mod:`fairseq_attn_plugins.cli.align`), and eflomal beside it."""
