"""Every process that imports the plugin is spared torch's compiler stack: importing the
plugin, the core and the recipe steps (every module of them) loads neither ``torch._dynamo``
nor ``torch._inductor`` (about a second per process, with sympy); the first compiled
flex_attention call imports dynamo itself and computes the same attention. In a fresh interpreter,
so that what other tests imported does not count."""

import math
import os
import sys

import pytest
import torch

from fairseq_attn_core.backends import flex

sys.path.insert(0, os.path.dirname(__file__))
import plugin_script  # noqa: E402

# The stages of one interpreter (plugin_script: one start of torch and fairseq, shared with
# test_refusal_hooks), each printing its own line as it ends: the plugin imported alone, then
# every module of the core, the plugin and the recipe steps, then the first compiled
# flex_attention call. Each stage sees what a fresh process importing the same modules would:
# the first imports a subset of the second's modules, and the third starts from a process the
# second found free of the compiler stack (the script's calls between them, a DataLoader and an
# autocast block, can only add modules: a stage's check fails if they load the compiler stack).


@pytest.fixture(scope="module")
def stages():
    """stage name -> its printed line, and the process's stderr (a stage that failed prints none)."""
    return plugin_script.stages(), plugin_script.run().stderr


def stage(stages, name) -> dict:
    printed, stderr = stages
    assert name in printed, stderr
    return printed[name]


# one worker runs these and test_refusal_hooks' script tests (pytest-xdist --dist loadgroup): one
# interpreter for all of them
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
