"""The steps of ``python -m fairseq_attn_recipes``: the table that lets a step's process import its
module alone names, for every step, the module whose ``add_parsers`` declares it, and every step
each module declares; a step run through the table parses and runs as it does with every module
loaded."""

import argparse
import os
import subprocess
import sys

from fairseq_attn_recipes import __main__ as steps


def declared(module_name):
    sub = argparse.ArgumentParser().add_subparsers()
    steps.step_module(module_name).add_parsers(sub)
    return set(sub.choices)


def test_the_table_names_each_step_of_each_module_once():
    seen = {}
    for name in steps.STEP_MODULES:
        for step in declared(name):
            assert step not in seen, f"{step} declared by {seen[step]} and {name}"
            seen[step] = name
    assert seen == steps.STEPS


def test_a_step_imports_its_module_alone_and_help_lists_every_step():
    code = ("import sys; from fairseq_attn_recipes.__main__ import main\n"
            "try:\n    main(['language-facts', 'de'])\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('fairseq_attn_recipes.'))))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(__file__))))
    assert p.returncode == 0, p.stderr
    loaded = set(p.stdout.strip().splitlines()[-1].split())
    others = {f"fairseq_attn_recipes.{m}" for m in steps.STEP_MODULES} - {"fairseq_attn_recipes.languages"}
    assert "fairseq_attn_recipes.languages" in loaded and not (loaded & others), loaded & others
    h = subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and all(step in h.stdout for step in [*steps.STEPS, "finished-before"])
    bad = subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", "scroe"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'scroe'" in bad.stderr and "'score'" in bad.stderr, bad.stderr
