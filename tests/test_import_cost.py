"""Every process that imports the plugin is spared torch's compiler stack: importing the
plugin, the core and the recipe steps (every module of them) loads neither ``torch._dynamo``
nor ``torch._inductor`` (about a second per process, with sympy); the first compiled
flex_attention call imports dynamo itself and computes the same attention. In a fresh interpreter,
so that what other tests imported does not count."""

import json
import math
import subprocess
import sys

import pytest
import torch

from fairseq_attn_core.backends import flex

COMPILER = ("torch._dynamo", "torch._inductor")


def loaded(names) -> str:
    return f"sorted(m for m in sys.modules if m in {tuple(names)!r} or m.startswith('torch._dynamo.'))"


# One interpreter (one start of torch and fairseq) for the three checks, each a stage that
# prints its own line as it ends: the plugin imported alone, then every module of the core, the
# plugin and the recipe steps, then the first compiled flex_attention call. Each stage sees what
# a fresh process importing the same modules would: the first imports a subset of the second's
# modules, and the third starts from a process the second found free of the compiler stack.
STAGES = (
    "import importlib, json, pkgutil, sys\n"
    "import fairseq_attn_plugins\n"
    f"print(json.dumps({{'stage': 'plugin', 'compiler': {loaded(COMPILER)}, 'torch': 'torch' in sys.modules,"
    " 'triton': 'triton' in sys.modules}),"
    " flush=True)\n"
    "names = []\n"
    "for top in ('fairseq_attn_core', 'fairseq_attn_plugins', 'fairseq_attn_recipes'):\n"
    "    pkg = importlib.import_module(top)\n"
    "    for m in pkgutil.walk_packages(pkg.__path__, top + '.'):\n"
    "        if not m.name.endswith('__main__'):\n"
    "            importlib.import_module(m.name)\n"
    "            names.append(m.name)\n"
    f"print(json.dumps({{'stage': 'every', 'modules': names, 'compiler': {loaded(COMPILER)}}}), flush=True)\n"
    "import torch\n"
    "p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))\n"
    "opt = torch.optim.SGD([p], lr=0.5, momentum=0.9)\n"
    "p.grad = torch.tensor([0.5, 0.25, -1.0])\n"
    "opt.state[p]['momentum_buffer'] = torch.tensor([0.5, 0.25, -1.0])\n"
    "state = opt.state_dict()\n"
    "opt.zero_grad()\n"
    "opt.state.clear()\n"
    "opt.load_state_dict(state)\n"
    "opt.add_param_group({'params': [torch.nn.Parameter(torch.zeros(2))]})\n"
    f"print(json.dumps({{'stage': 'optimizer', 'compiler': {loaded(COMPILER)}, 'p': p.tolist(), 'grad': p.grad,\n"
    "                  'buffer': opt.state_dict()['state'][0]['momentum_buffer'].tolist(),\n"
    "                  'groups': len(opt.param_groups)}), flush=True)\n"
    "from fairseq_attn_core.backends import flex\n"
    "if flex.HAVE_FLEX:\n"
    "    before = 'torch._dynamo' in sys.modules\n"
    "    g = torch.Generator().manual_seed(0)\n"
    "    q, k, v = (torch.randn(2, 2, 5, 16, generator=g) for _ in range(3))\n"
    "    bias = torch.tensor(0.5)\n"
    "    def score_mod(score, b, h, i, j):\n"
    "        return score - bias * (i - j).abs()\n"
    "    out = flex.call(q, k, v, score_mod, None, 0.25, compile='aot_eager')\n"
    "    opt.zero_grad()\n"
    "    decorated = torch.optim.Optimizer.zero_grad.__wrapped__.__wrapped__  # torch's method, under its decorator\n"
    "    print(json.dumps({'stage': 'flex', 'before': before, 'after': 'torch._dynamo' in sys.modules,\n"
    "                      'zero_grad_through_torch': getattr(decorated, '__dynamo_disable', None) is not None,\n"
    "                      'q': q.tolist(), 'k': k.tolist(), 'v': v.tolist(), 'out': out.tolist()}), flush=True)\n")


@pytest.fixture(scope="module")
def stages():
    """stage name -> its printed line, and the process's stderr (a stage that failed prints none)."""
    done = subprocess.run([sys.executable, "-c", STAGES], capture_output=True, text=True)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {line.pop("stage"): line for line in lines}, done.stderr


def stage(stages, name) -> dict:
    printed, stderr = stages
    assert name in printed, stderr
    return printed[name]


# one worker runs the three (pytest-xdist --dist loadgroup): one interpreter for all of them
pytestmark = pytest.mark.xdist_group("import_cost")


def test_importing_the_plugin_loads_no_dynamo(stages):
    out = stage(stages, "plugin")
    assert out["torch"]  # the plugin did import torch: the check below is not vacuous
    assert out["compiler"] == []
    assert not out["triton"]  # the Triton kernels are imported by the first call that runs them


def test_importing_every_module_of_the_core_plugin_and_recipes_loads_no_dynamo(stages):
    out = stage(stages, "every")
    assert {"fairseq_attn_core.backends.flex", "fairseq_attn_core.backends.distance.flex_forms",
            "fairseq_attn_plugins.integration.trainer_checks", "fairseq_attn_recipes.recording"} \
        <= set(out["modules"])
    assert out["compiler"] == []


def test_an_optimizer_loads_no_dynamo_and_steps_as_torchs(stages):
    """torch's optimizer methods (add_param_group, zero_grad, state_dict, load_state_dict: fairseq-train
    calls them; its Adam steps by its own code) import dynamo at their first call, about 2 s of every
    training process; the plugin's fix runs them as they are while nothing can compile
    (integration/optimizer_methods.py), and they do what torch's do."""
    out = stage(stages, "optimizer")
    assert out["compiler"] == []
    # the state saved, cleared and loaded back; zero_grad set the gradient to None; a second group added
    assert out["buffer"] == [0.5, 0.25, -1.0] and out["grad"] is None and out["groups"] == 2
    assert out["p"] == [1.0, -2.0, 3.0]


@pytest.mark.skipif(not flex.HAVE_FLEX, reason="torch has no flex_attention")
def test_the_first_compiled_flex_call_imports_dynamo_and_computes_attention(stages):
    out = stage(stages, "flex")
    assert not out["before"] and out["after"]
    assert out["zero_grad_through_torch"]  # dynamo imported: torch's own decorated optimizer method runs
    q, k, v = (torch.tensor(out[n], dtype=torch.float64) for n in ("q", "k", "v"))
    B, H, T, D = q.shape
    expected = torch.zeros(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                scores = [0.25 * float(q[b, h, i] @ k[b, h, j]) - 0.5 * abs(i - j) for j in range(T)]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = sum(weights)
                for j in range(T):
                    expected[b, h, i] += weights[j] / total * v[b, h, j]
    torch.testing.assert_close(torch.tensor(out["out"], dtype=torch.float64), expected,
                               rtol=1e-4, atol=1e-5)
