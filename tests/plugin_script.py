"""A script that imports the plugin, run once per test process in a fresh interpreter (not a test
module): one start of torch and fairseq for test_refusal_hooks (the interpreter of a script or
notebook is left alone; what says nothing is dropped) and test_import_cost (no compiler stack).
Their tests carry ``xdist_group("import_cost")``: one pytest-xdist worker runs them all, and
:func:`run` starts the script once there.

The script, in order, as a user's script would meet each thing:

1. ``import fairseq_attn_plugins`` first; Python's error hooks compared with those saved before it
   ("untouched"), the filters of fairseq's logger printed;
2. the stage ``plugin``: the compiler stack, torch and triton in ``sys.modules`` after that import;
3. the warnings fairseq-train gives on a CPU (its batch iterator's pinned memory, its step's
   autocast), which the package drops by message, and another warning, which passes; then the
   line :data:`END_OF_WARNINGS` on stderr;
4. the stages ``every`` (every module of the core, the plugin and the recipe steps imported),
   ``optimizer`` and ``flex`` (the first compiled flex_attention call), each a JSON line on stdout
   as it ends (a stage that fails prints none: its traceback goes to stderr);
5. the line :data:`OWN_ERROR` on stderr, then an error of the script raised by the plugin, which
   keeps its traceback (the process ends with it, status 1).
"""

import functools
import json
import subprocess
import sys

from fairseq_attn_plugins.integration import quiet_imports

END_OF_WARNINGS = "--- end of the script's warnings"
OWN_ERROR = "--- the script's own error"


def loaded(names) -> str:
    return f"sorted(m for m in sys.modules if m in {tuple(names)!r} or m.startswith('torch._dynamo.'))"


COMPILER = ("torch._dynamo", "torch._inductor")

SCRIPT = (
    "import argparse, importlib, json, logging, pkgutil, sys, traceback, warnings\n"
    "h = sys.excepthook; e = argparse.ArgumentParser.error\n"
    "import fairseq_attn_plugins\n"
    "print('untouched' if sys.excepthook is h and argparse.ArgumentParser.error is e else 'hooks changed', flush=True)\n"
    f"print(logging.getLogger({quiet_imports.LOGGER!r}).filters, flush=True)\n"
    f"print(json.dumps({{'stage': 'plugin', 'compiler': {loaded(COMPILER)}, 'torch': 'torch' in sys.modules,"
    " 'triton': 'triton' in sys.modules}), flush=True)\n"
    "import torch\n"
    "list(torch.utils.data.DataLoader([1, 2], pin_memory=True))\n"
    "with torch.cuda.amp.autocast(enabled=False):\n"
    "    pass\n"
    "warnings.warn('pin_memory: another warning')\n"
    f"print({END_OF_WARNINGS!r}, file=sys.stderr, flush=True)\n"
    "try:\n"
    "    names = []\n"
    "    for top in ('fairseq_attn_core', 'fairseq_attn_plugins', 'fairseq_attn_recipes'):\n"
    "        pkg = importlib.import_module(top)\n"
    "        for m in pkgutil.walk_packages(pkg.__path__, top + '.'):\n"
    "            if not m.name.endswith('__main__'):\n"
    "                importlib.import_module(m.name)\n"
    "                names.append(m.name)\n"
    f"    print(json.dumps({{'stage': 'every', 'modules': names, 'compiler': {loaded(COMPILER)}}}), flush=True)\n"
    "    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))\n"
    "    opt = torch.optim.SGD([p], lr=0.5, momentum=0.9)\n"
    "    p.grad = torch.tensor([0.5, 0.25, -1.0])\n"
    "    opt.state[p]['momentum_buffer'] = torch.tensor([0.5, 0.25, -1.0])\n"
    "    state = opt.state_dict()\n"
    "    opt.zero_grad()\n"
    "    opt.state.clear()\n"
    "    opt.load_state_dict(state)\n"
    "    opt.add_param_group({'params': [torch.nn.Parameter(torch.zeros(2))]})\n"
    f"    print(json.dumps({{'stage': 'optimizer', 'compiler': {loaded(COMPILER)}, 'p': p.tolist(), 'grad': p.grad,\n"
    "                      'buffer': opt.state_dict()['state'][0]['momentum_buffer'].tolist(),\n"
    "                      'groups': len(opt.param_groups)}), flush=True)\n"
    "    from fairseq_attn_core.backends import flex\n"
    "    if flex.HAVE_FLEX:\n"
    "        before = 'torch._dynamo' in sys.modules\n"
    "        g = torch.Generator().manual_seed(0)\n"
    "        q, k, v = (torch.randn(2, 2, 5, 16, generator=g) for _ in range(3))\n"
    "        bias = torch.tensor(0.5)\n"
    "        def score_mod(score, b, h, i, j):\n"
    "            return score - bias * (i - j).abs()\n"
    "        out = flex.call(q, k, v, score_mod, None, 0.25, compile='aot_eager')\n"
    "        opt.zero_grad()\n"
    "        decorated = torch.optim.Optimizer.zero_grad.__wrapped__.__wrapped__  # torch's method, under its decorator\n"
    "        print(json.dumps({'stage': 'flex', 'before': before, 'after': 'torch._dynamo' in sys.modules,\n"
    "                          'zero_grad_through_torch': getattr(decorated, '__dynamo_disable', None) is not None,\n"
    "                          'q': q.tolist(), 'k': k.tolist(), 'v': v.tolist(), 'out': out.tolist()}), flush=True)\n"
    "except Exception:\n"
    "    traceback.print_exc()\n"
    f"print({OWN_ERROR!r}, file=sys.stderr, flush=True)\n"
    "from fairseq_attn_core.flags import validate_attention_args\n"
    "validate_attention_args(argparse.Namespace(attn_pieces='nosuch', attn_backend='auto'))\n")


@functools.lru_cache(maxsize=None)
def run() -> subprocess.CompletedProcess:
    """The script's process, once per test process."""
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)


def stages() -> dict:
    """Stage name -> its printed line (without the name)."""
    lines = [json.loads(line) for line in run().stdout.splitlines() if line.startswith('{"stage": ')]
    return {line.pop("stage"): line for line in lines}


def script_stdout() -> str:
    """What the script printed itself (the stages' lines left out)."""
    return "".join(line for line in run().stdout.splitlines(keepends=True) if not line.startswith('{"stage": '))


def script_stderr() -> str:
    """stderr before the stages (the import and the warnings) and from the script's own error on,
    the two marker lines left out; the stages' own stderr is not the script's."""
    err = run().stderr
    warned, sep, rest = err.partition(END_OF_WARNINGS + "\n")
    if not sep:
        return err
    return warned + rest.partition(OWN_ERROR + "\n")[2]
