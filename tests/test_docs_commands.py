"""Every command block of README.md and docs/ is checked, and every relative link and #anchor resolves.

A command block is a fenced block marked ``bash``, ``sh``, ``shell`` or ``console`` (``$ `` lines),
or an unmarked one whose lines start like a command. In each command line:

* each ``VAR=`` is a recipe variable the table of fairseq_attn_recipes/variables.py knows (its value
  allowed where the table checks values), a variable another tool reads (:data:`OTHER_VARIABLES`,
  each found in the file named), or a shell variable the block itself uses later (``R=...; $R``);
* each ``--flag`` is a flag of the command it is given to: fairseq-train's and fairseq-generate's
  through fairseq's own parser with the plugin loaded (``--user-dir``), also the flags of
  ``MODEL_ARGS`` / ``EXTRA_ARGS`` for the line's ``ARCH``; this package's commands and the recipes'
  steps through their ``--help`` (docs/reference/cli.md, kept equal to the parsers); data.sh through
  the actions and flags of ``data_main`` in recipes/lib/common.sh; a recipe script takes no argument;
* each path into the repository exists (a recipe's ``work/`` folder is made by the recipe).

Some blocks are also run by a test (:data:`RUN_BY`). Commands of other projects (pip, sacrebleu,
tensorboard, ...) are named in :data:`OTHER_TOOLS`; their flags are theirs and not checked.
"""

import functools
import importlib.util
import os
import re
import shlex

import pytest

from doc_markdown import ROOT, blocks, docs_files, read
from fairseq_attn_recipes import reference_docs, variables

COMMAND_INFO = ("bash", "sh", "shell", "console")
COMMAND_START = re.compile(r"^\s*(\$ )?(bash |fairseq-|python |[A-Z][A-Z0-9_]*=)")

#: variables read by something else than a recipe script, and a file that reads each
OTHER_VARIABLES = {
    "TEST_WORKERS": "scripts/test.sh",
    "DOC_FILES": "tests/test_docs_text.py",
    "COMET_GPUS": "fairseq_attn_records/comet.py",
    "COMET_BATCH_SIZE": "fairseq_attn_records/comet.py",
    "SACREBLEU_SEED": "fairseq_attn_reports/significance.py",
    "GPU_CHECKS_DRY": "benchmarks/gpu_checks.sh",
    "GPU_CHECKS_STEPS": "benchmarks/gpu_checks.sh",
}
#: commands of other projects, whose flags are theirs
OTHER_TOOLS = {"pip", "tensorboard", "sacrebleu", "comet-score", "wandb", "torchrun", "srun",
               # the shell's own words and tools
               "cd", ".", "source", "cp", "mv", "rm", "ls", "cat", "tail", "head", "grep", "mkdir", "tar", "git",
               "echo", "printf", "sleep", "wait", "kill", "for", "do", "done", "while", "if", "then", "else", "fi"}
#: words that run the command after them
PREFIXES = {"setsid", "nohup", "time", "env"}
#: blocks a test runs (the command's first words -> the test that runs it)
RUN_BY = {
    "bash scripts/test.sh": ".ci/run (CI runs it on a clean clone)",
    "bash scripts/demo.sh": "tests/test_demo.py (fairseq-attn-demo --quick, the command demo.sh runs after the set-up)",
    "fairseq-attn-demo": "tests/test_demo.py (with --quick)",
    "QUICK=1 ROWS=baseline,csan2d bash recipes/wmt14_en_de/table1.sh": "tests/test_table1.py (table1.sh, QUICK=1's sizes, "
                                                                      "other rows)",
    "QUICK=1 bash recipes/wmt14_en_de/lengths.sh": "tests/test_lengths_study.py (QUICK=1, smaller QUICK_SIZES and MAX_UPDATE)",
    "python tests/doc_markdown.py": "tests/test_docs_text.py (the same functions)",
}
WORK_FOLDER = re.compile(r"^recipes/[^/]+/work(/|$)")
TOP_LEVEL = tuple(sorted(e for e in os.listdir(ROOT) if not e.startswith(".")))


def command_blocks():
    """(file, line, text) of every command block of README.md and docs/."""
    found = []
    for path in docs_files(leave_out=()):
        for info, body, line in blocks(read(path)):
            lang = info.split()[0] if info else ""
            if lang in COMMAND_INFO or (lang == "" and any(COMMAND_START.match(x) for x in body.splitlines())):
                if lang == "console":
                    body = "\n".join(x[2:] for x in body.splitlines() if x.startswith("$ "))
                found.append((path, line, body))
    return found


def command_lines(body: str):
    """The block's commands, each as its words (continuations joined, comments dropped, split at ; && || |)."""
    text = body.replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split, lexer.commenters = True, "#"
        current = []
        for word in lexer:
            if word in (";", "&&", "||", "|", "&"):
                commands.append(current)
                current = []
            else:
                current.append(word)
        commands.append(current)
    return [c for c in commands if c]


def assignment(word: str):
    m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", word, re.S)
    return (m.group(1), m.group(2)) if m else None


def known_variable(name: str, value: str, body: str) -> str:
    """'' when ``name=value`` is a known variable with an allowed value, else what is wrong."""
    if name in variables.VARIABLES or name.startswith(variables.TOKENIZER_PREFIX):
        if "$" in value or value == "":
            return ""
        line = variables.problem_line(name, value)
        return f"{name}={value}: not allowed ({line})" if line else ""
    if name in variables.CHECKED_IN_PLACE or name in variables.FREE:
        return ""
    if name in OTHER_VARIABLES:
        with open(os.path.join(ROOT, OTHER_VARIABLES[name]), encoding="utf-8") as f:
            return "" if name in f.read() else f"{name}: not read by {OTHER_VARIABLES[name]}"
    if re.search(r"\$\{?" + name + r"\b", body):
        return ""  # a shell variable of the block
    return f"{name}: no recipe variable (docs/reference/variables.md) nor a variable a tool reads"


def flags_of(words):
    """The flags among a command's words (a quoted value holding flags, as --train-args "--x 1", is a value)."""
    return [w.split("=", 1)[0] for w in words if w.startswith("--") and len(w) > 2 and not re.search(r"\s", w)]


@pytest.fixture(scope="module")
def helps():
    return reference_docs.command_helps()


@pytest.fixture(scope="module")
def fairseq_parsers():
    """Parse a fairseq-train or fairseq-generate command line with fairseq's parser, the plugin loaded:
    the argparse error, or ''."""
    from fairseq_attn_recipes import flag_origins
    from fairseq_attn_recipes.train import import_plugin
    import_plugin()
    from fairseq import options

    makers = {"fairseq-train": options.get_training_parser, "fairseq-generate": options.get_generation_parser}

    def problem(tool, argv):
        """A line with ``...`` for the rest (``fairseq-train ... --save-interval-updates 1000``) gets a
        data folder and, for training, fairseq's own ``--arch transformer``."""
        argv = [os.path.join(ROOT, "fairseq_attn_plugins") if w == "fairseq_attn_plugins" else w for w in argv if w != "..."]
        if not argv or argv[0].startswith("-"):
            argv = ["DATA", *argv]
        if tool == "fairseq-train" and "--arch" not in argv and "-a" not in argv:
            argv += ["--arch", "transformer"]
        try:
            with flag_origins.argument_errors_raised():
                options.parse_args_and_arch(makers[tool](), input_args=argv)
        except flag_origins.ArgumentError as e:
            return e.message
        except SystemExit as e:  # the plugin's one-line refusal
            return f"exit {e.code}"
        return ""
    return problem


def data_sh_grammar():
    """The actions of data.sh and the flags of each, from data_main in recipes/lib/common.sh."""
    with open(os.path.join(ROOT, "recipes", "lib", "common.sh"), encoding="utf-8") as f:
        body = f.read().split("\ndata_main() {", 1)[1].split("\n}\n", 1)[0]
    actions = re.findall(r"^    ([a-z|]+)\)", body, re.M)
    flags = re.findall(r"^          (--[a-z-]+)\)", body, re.M)
    return {a for group in actions for a in group.split("|")}, set(flags)


def problems_of(words, body, helps, fairseq_problem):
    """What is wrong with one command (a list of strings)."""
    out, env = [], {}
    while words and assignment(words[0]) or words[:1] == ["export"]:
        if words[0] == "export":
            words = words[1:]
            continue
        name, value = assignment(words[0])
        env[name] = value
        said = known_variable(name, value, body)
        if said:
            out.append(said)
        words = words[1:]
    while words and (words[0] in PREFIXES or words[0] == "nice"):
        words = words[3:] if words[0] == "nice" and words[1:2] == ["-n"] else words[1:]
    if not words:
        return out
    tool, args = words[0], words[1:]
    for w in words:
        path = w.rstrip("/")
        if "$" not in path and "{" not in path and path.split("/", 1)[0] in TOP_LEVEL and "/" in path:
            if not WORK_FOLDER.match(path) and not os.path.exists(os.path.join(ROOT, path)):
                out.append(f"{w}: no such path in the repository")
    if tool in ("fairseq-train", "fairseq-generate"):
        said = fairseq_problem(tool, args)
        if said:
            out.append(f"{tool}: {said}")
    elif tool in dict(reference_docs.COMMANDS):
        sub = f"{tool} {args[0]}" if args and f"{tool} {args[0]}" in helps else tool
        out += [f"{sub}: no flag {f}" for f in flags_of(args) if not re.search(re.escape(f) + r"(?![\w-])", helps[sub])]
    elif tool == "python" and args[:2] == ["-m", "fairseq_attn_recipes"]:
        sub = f"python -m fairseq_attn_recipes {args[2]}"
        if sub not in helps:
            out.append(f"{sub}: no such step")
        else:
            out += [f"{sub}: no flag {f}" for f in flags_of(args[3:]) if not re.search(re.escape(f) + r"(?![\w-])", helps[sub])]
    elif tool == "python" and args[:1] == ["-m"]:
        if importlib.util.find_spec(args[1].split(".")[0]) is None:
            out.append(f"python -m {args[1]}: no such module")
    elif tool == "python":
        target = args[0] if args else ""
        if not (args[:1] == ["-c"] or os.path.exists(os.path.join(ROOT, target))):
            out.append(f"python {target}: neither a file of the repository nor python -c")
    elif tool == "fairseq-hydra-train":
        out += [f"fairseq-hydra-train: no flag {f}" for f in flags_of(args) if f not in ("--config-dir", "--config-name")]
    elif tool == "bash":
        script = args[0] if args else ""
        if script.endswith("/data.sh"):
            actions, flags = data_sh_grammar()
            if len(args) < 2 or args[1] not in actions:
                out.append(f"{script}: give one of {sorted(actions)}")
            out += [f"{script}: no flag {f}" for f in flags_of(args[2:]) if f not in flags]
        elif script.startswith("recipes/") and len(args) > 1:
            out.append(f"{script}: a recipe script takes no argument (settings are variables)")
        elif script == "scripts/test.sh":
            pass  # its arguments go to pytest
        for name in ("MODEL_ARGS", "EXTRA_ARGS"):
            if env.get(name) and "$" not in env[name]:
                arch = env.get("ARCH", "transformer_attn_wmt_en_de")
                argv = ["DATA", "--user-dir", "fairseq_attn_plugins", "--arch", arch, *shlex.split(env[name])]
                said = fairseq_problem("fairseq-train", argv)
                if said:
                    out.append(f"{name} with ARCH={arch}: {said}")
    elif tool not in OTHER_TOOLS:
        out.append(f"{tool}: a command this test does not know (add it to OTHER_TOOLS if it is another project's)")
    return out


BLOCKS = command_blocks()


@pytest.mark.parametrize("path, line, body", BLOCKS, ids=[f"{p}:{n}" for p, n, _ in BLOCKS])
def test_a_command_block_is_checked(path, line, body, helps, fairseq_parsers):
    exported = {}
    problems = []
    for words in command_lines(body):
        if words[0] == "export":  # exported values hold for the block's later lines
            exported.update(dict(a for a in map(assignment, words[1:]) if a))
        given = [f"{k}={v}" for k, v in exported.items() if not any(w.startswith(k + "=") for w in words)]
        problems += problems_of(given + words if words[0] != "export" else words, body, helps, fairseq_parsers)
    assert problems == [], f"{path}:{line}: " + "; ".join(problems)


def test_the_checks_refuse_what_is_wrong(helps, fairseq_parsers):
    """Each check finds a wrong name, flag or path (the test above would pass on anything otherwise)."""
    def check(line):
        return [p for w in command_lines(line) for p in problems_of(w, line, helps, fairseq_parsers)]

    accepted = ["MAX_UPDATE=4 bash recipes/wmt14_en_de/train.sh",
                "PRUNE_CHECKPOINTS=1 bash recipes/wmt14_en_de/train.sh",
                "bash recipes/wmt14_en_de/data.sh prune --yes --forget-gone",
                "fairseq-attn-results --ref R A B --md t.md",
                "fairseq-attn-paper table1 --rows all --no-comet-hint",
                "fairseq-train D --user-dir fairseq_attn_plugins --arch transformer_csan2d_wmt_en_de --csan-window 5",
                "ARCH=transformer_attn_wmt_en_de MODEL_ARGS='--encoder-layers 3' bash recipes/wmt14_en_de/train.sh"]
    refused = ["MAX_UPDATES=4 bash recipes/wmt14_en_de/train.sh",
               "MAX_UPDATE=abc bash recipes/wmt14_en_de/train.sh",
               "PRUNE_CHECKPOINT=1 bash recipes/wmt14_en_de/train.sh",
               "bash recipes/wmt14_en_de/train.sh --dry-run",
               "bash recipes/wmt14_en_de/data.sh prune --force",
               "bash recipes/wmt14_en_de/data.sh purge",
               "bash recipes/nowhere/train.sh",
               "fairseq-attn-results --ref R A B --markdown t.md",
               "python -m fairseq_attn_recipes study-rescore docs/results/x.json --bogus",
               "fairseq-train D --user-dir fairseq_attn_plugins --arch transformer_csan2d_wmt_en_de --csan-windw 5",
               "ARCH=transformer_attn_wmt_en_de MODEL_ARGS='--encoder-layerz 3' bash recipes/wmt14_en_de/train.sh",
               "frobnicate --x"]
    assert {line: check(line) for line in accepted} == {line: [] for line in accepted}
    assert [line for line in refused if check(line) == []] == []


def test_the_blocks_a_test_runs_are_in_the_docs():
    text = "\n".join(body for _, _, body in BLOCKS)
    for command, test in RUN_BY.items():
        assert command in text, f"{command}: no block of the docs holds it any more"
        assert os.path.exists(os.path.join(ROOT, test.split()[0])), test


def test_ci_runs_the_readmes_test_command():
    readme = [body for path, _, body in BLOCKS if path == "README.md"]
    first = command_lines(readme[0])[0]
    assert first == ["bash", "scripts/test.sh"], "README's first command block starts with the test command"
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        assert "\nbash scripts/test.sh\n" in f.read()


# ---------------------------------------------------------------- links and anchors

LINK = re.compile(r"(?<!\!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")


@functools.lru_cache(maxsize=None)
def anchors(text: str):
    """The anchors GitHub makes of a page's headings (outside code blocks), duplicates numbered."""
    seen, out = {}, set()
    fence = None
    for line in text.splitlines():
        m = re.match(r"^\s*(```|~~~)", line)
        if m:
            fence = None if fence == m.group(1) else (fence or m.group(1))
            continue
        if fence:
            continue
        h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if h:
            title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h.group(1))
            slug = reference_docs.anchor_of(title)
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    out |= set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    return frozenset(out)


def links(text: str):
    """The link targets of a page's prose (code blocks and inline code left out)."""
    prose = re.sub(r"^\s*(```|~~~).*?^\s*\1", "", text, flags=re.S | re.M)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return [a or b for a, b in LINK.findall(prose)]


def broken_links(path: str):
    out = []
    for target in links(read(path)):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        file, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        full = os.path.join(ROOT, dest)
        if not os.path.exists(full):
            out.append(f"{target}: no {dest}")
        elif anchor and dest.endswith(".md") and anchor not in anchors(read(dest)):
            out.append(f"{target}: no heading #{anchor} in {dest}")
    return out


PAGES = docs_files(leave_out=())


@pytest.mark.parametrize("path", PAGES)
def test_every_relative_link_and_anchor_resolves(path):
    assert broken_links(path) == [], path


def test_the_link_check_finds_a_broken_link_and_anchor(tmp_path):
    page = "# A page\n\n## Two words\n\nSee [x](#two-words), [y](#three), [z](missing.md) and [w](a.md#two-words).\n"
    assert reference_docs.anchor_of("Scores by `--by-length` (A, b)") == "scores-by---by-length-a-b"
    assert "two-words" in anchors(page)
    assert links(page) == ["#two-words", "#three", "missing.md", "a.md#two-words"]
    assert anchors("## x\n## x\n") == {"x", "x-1"}
