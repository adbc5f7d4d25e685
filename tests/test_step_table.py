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


def test_a_step_imports_its_module_alone_and_help_lists_every_step(tmp_path):
    # a step of the table, and finished-before (declared by __main__ itself: no step module at all)
    code = ("import sys; from fairseq_attn_recipes.__main__ import main\n"
            "for argv in sys.argv[1:]:\n"
            "    try:\n        main(argv.split())\n    except SystemExit:\n        pass\n"
            "    print(' '.join(sorted(m for m in sys.modules if m.startswith('fairseq_attn_recipes.'))))")
    every = {f"fairseq_attn_recipes.{m}" for m in steps.STEP_MODULES}
    for argv, module in (("language-facts de", "languages"),
                         (f"finished-before --save-dir {tmp_path / 'no_run'} -- --arch x", None)):
        p = subprocess.run([sys.executable, "-c", code, argv], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(__file__))))
        assert p.returncode == 0, p.stderr
        loaded = set(p.stdout.strip().splitlines()[-1].split())
        own = {f"fairseq_attn_recipes.{module}"} if module else set()
        assert own <= loaded and not (loaded & (every - own)), (argv, loaded & (every - own))
    h = subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and all(step in h.stdout for step in [*steps.STEPS, "finished-before"])
    bad = subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", "scroe"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'scroe'" in bad.stderr and "'score'" in bad.stderr, bad.stderr
