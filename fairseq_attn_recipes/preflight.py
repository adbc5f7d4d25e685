"""Checks before any long work: the tools a recipe needs and the architecture it trains."""

from .step_inputs import die

# what to install when a tool is missing
INSTALL_HINT = {
    "moses": "pip install sacremoses",
    "jieba": "pip install jieba",
    "mecab": "pip install fugashi unidic-lite",
    "kytea": "pip install kytea (needs the KyTea C++ library and a model) or use TOKENIZER_JA=mecab",
    "subword-nmt": "pip install subword-nmt",
    "sentencepiece": "pip install sentencepiece",
    "fairseq": "bash scripts/setup_env.sh (installs fairseq into .venv)",
    "sacrebleu": "pip install sacrebleu",
}


def _tool_module(tool: str) -> str:
    return {"moses": "sacremoses", "jieba": "jieba", "mecab": "fugashi", "kytea": "Mykytea",
            "subword-nmt": "subword_nmt", "sentencepiece": "sentencepiece", "fairseq": "fairseq",
            "sacrebleu": "sacrebleu"}[tool]


def cmd_check_tools(args):
    missing = []
    for tool in args.tools:
        try:
            import importlib.util
            if importlib.util.find_spec(_tool_module(tool)) is None:
                raise ImportError(f"no module named {_tool_module(tool)!r}")
            if tool == "mecab":
                import fugashi
                fugashi.Tagger()  # needs a dictionary (unidic-lite)
        except Exception as e:  # ImportError, or a MeCab without dictionary
            missing.append(f"  {tool}: {type(e).__name__}: {e}\n    fix: {INSTALL_HINT[tool]}")
    if missing:
        die("missing tools:\n" + "\n".join(missing))


def cmd_check_arch(args):
    import difflib

    from fairseq_attn_reports.arch_names import registered_arch_names
    names = registered_arch_names()
    unknown = [a for a in args.arch if a not in names]
    if unknown:
        near = difflib.get_close_matches(unknown[0], names, n=4, cutoff=0.6)
        if args.variable:  # the variable the user set, as set (ARCHS=baseline,relpoz: its short names)
            given = dict(zip(args.arch, args.variable.partition("=")[2].split(",")))[unknown[0]]
            what = f"{args.variable}: {given!r} is {unknown[0]}, not a registered architecture"
        else:
            what = f"unknown ARCH={unknown[0]!r}"
        die(f"{what}: " + (f"the nearest registered architectures are {', '.join(near)}"
                           if near else "no registered architecture is near it")
            + " (each piece P registers transformer_P_wmt_en_de and transformer_P_vaswani_wmt_en_de_big; "
              "fairseq-attn-pieces lists the pieces)")


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("check-tools"); p.add_argument("tools", nargs="+", choices=sorted(INSTALL_HINT)); p.set_defaults(fn=cmd_check_tools)
    p = sub.add_parser("check-arch"); p.add_argument("arch", nargs="+"); p.set_defaults(fn=cmd_check_arch)
    p.add_argument("--variable", metavar="NAME=VALUE",
                   help="the comma-separated variable the architectures were given as, one item each (ARCHS=baseline,relpos)")
