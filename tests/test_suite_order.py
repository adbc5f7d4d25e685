"""The suite's own order (conftest.SLOWEST): every test it names exists, so none of the slowest
tests loses its early start by a rename."""

import ast
import os

import conftest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_slowest_test_is_a_test_function_of_its_file():
    for nodeid in conftest.SLOWEST:
        path, name = nodeid.split("::")
        tree = ast.parse(open(os.path.join(ROOT, path), encoding="utf-8").read())
        names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert name in names, f"conftest.SLOWEST names {nodeid}: no such test"
