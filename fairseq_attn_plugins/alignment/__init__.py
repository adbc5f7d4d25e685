"""Attention as word alignment: a trained model's cross-attention as links (:mod:`.attention`),
subword pieces to words (:mod:`.words`), eflomal beside it (:mod:`.statistical`). What
``fairseq-attn-align`` does with them: :mod:`fairseq_attn_reports.alignment_evaluation`."""
