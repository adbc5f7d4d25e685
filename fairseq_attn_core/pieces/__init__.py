"""One module per attention variant. Every module here is imported, so a piece
registers itself (``@register_piece``) just by living in this folder; the model
then registers ``transformer_<piece>_wmt_en_de`` and
``transformer_<piece>_vaswani_wmt_en_de_big`` for it."""

import importlib
import pkgutil

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_mod}")
