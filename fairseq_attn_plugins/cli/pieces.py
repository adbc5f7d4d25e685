"""fairseq-attn-pieces: the attention pieces, their flags and the layers of an architecture.

    fairseq-attn-pieces [PIECE ...]          every piece (or those named): capabilities, and
                                             each flag with its default, allowed values, help
    fairseq-attn-pieces --arch ARCH          the pieces per layer of a transformer_attn
                                             architecture at its defaults, and each active
                                             piece's flags with their values
    fairseq-attn-pieces --markdown PIECE     the flag table of a piece, as in its doc
    fairseq-attn-pieces --update-docs DIR    rewrite the flag tables of DIR/*.md

(``fairseq-train --arch A --help`` shows no model or piece flag: a fairseq 0.12 limitation.)
Everything is generated from the pieces' declarations (:mod:`fairseq_attn_core.catalogue`).
"""

import argparse
import ast
import difflib
import glob
import importlib.util
import os
import sys
from typing import List, Optional

from fairseq_attn_records.command_line import Parser
from fairseq_attn_records.output_files import write_text

from .. import registration


def get_parser() -> argparse.ArgumentParser:
    p = Parser(prog="fairseq-attn-pieces", description=__doc__.split("\n\n")[0])
    p.add_argument("pieces", nargs="*", metavar="PIECE", help="pieces to describe (default: all)")
    p.add_argument("--arch", help="a transformer_attn architecture: its pieces per layer")
    p.add_argument("--markdown", action="store_true", help="flag tables in Markdown")
    p.add_argument("--update-docs", metavar="DIR",
                   help="regenerate the flag tables between <!-- flags: NAME --> markers in DIR/*.md")
    return p


def piece_names() -> List[str]:
    """The pieces' names as their classes declare them (``name = "..."`` in each ``@register_piece``
    class of fairseq_attn_core/pieces/), read without importing the pieces: an unknown name is
    refused without importing torch. A test holds them equal to the registry's."""
    folder = os.path.join(importlib.util.find_spec("fairseq_attn_core").submodule_search_locations[0], "pieces")
    names = []
    for path in sorted(glob.glob(os.path.join(folder, "*.py"))):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for cls in tree.body:
            if isinstance(cls, ast.ClassDef) and any(
                    isinstance(d, ast.Name) and d.id == "register_piece" for d in cls.decorator_list):
                names += [s.value.value for s in cls.body if isinstance(s, ast.Assign)
                          and [getattr(t, "id", None) for t in s.targets] == ["name"]
                          and isinstance(s.value, ast.Constant)]
    return sorted(names)


def main(argv: Optional[List[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    names = piece_names()
    unknown = [n for n in args.pieces if n not in names]
    if unknown:
        print(f"fairseq-attn-pieces: unknown piece(s) {unknown}; allowed: {names}", file=sys.stderr)
        return 1
    from fairseq_attn_core import PIECES, catalogue  # (registers the pieces)

    if args.update_docs:
        paths = sorted(glob.glob(os.path.join(args.update_docs, "*.md")))
        if not paths:
            print(f"fairseq-attn-pieces: --update-docs {args.update_docs}: no .md file there",
                  file=sys.stderr)
            return 1
        for path in paths:
            with open(path, encoding="utf-8") as f:
                old = f.read()
            new = catalogue.update_doc(old)
            if new != old:
                write_text(path, new)
                print(f"updated {path}")
        return 0
    if args.arch:
        registration.register()  # the architectures
        from ..models import attn_architectures, is_attn_arch

        if not is_attn_arch(args.arch):
            known = attn_architectures()
            nearest = difflib.get_close_matches(args.arch, known, n=3, cutoff=0.0)
            print(f"fairseq-attn-pieces: --arch {args.arch!r} is not a transformer_attn architecture; "
                  f"the nearest: {', '.join(nearest)} ({len(known)} in all: transformer_<piece>_wmt_en_de "
                  f"and its presets, for every piece fairseq-attn-pieces lists)", file=sys.stderr)
            return 1
        from fairseq.models import ARCH_CONFIG_REGISTRY

        defaults = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[args.arch](defaults)
        print(catalogue.arch_layers(defaults))
        return 0
    if args.markdown:
        print("\n\n".join(f"{n}\n\n{catalogue.markdown_table(PIECES[n])}"
                          for n in args.pieces or sorted(PIECES)))
        return 0
    print(catalogue.text_listing(args.pieces))
    return 0


if __name__ == "__main__":
    sys.exit(main())
