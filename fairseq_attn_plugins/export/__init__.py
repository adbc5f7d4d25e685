"""Exporting trained models to inference engines (``fairseq-attn-export``).

:mod:`.ct2`: CTranslate2, for the architectures its Transformer spec represents exactly.
"""

from .ct2 import ExportError, export_ct2, unsupported_reason  # noqa: F401
