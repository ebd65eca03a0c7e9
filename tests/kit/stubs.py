"""Stubs made from the references, for the kit's own tests.

The kit's suite never reads `exercises/`: a learner fills those files in, and the suite must pass
before and after. Where a test needs "a learner who has not started", it grades these instead: the
reference's module with every function's body replaced by `raise NotImplementedError`, as the
shipped stubs are. (`python -m grader dev check` checks the shipped stubs themselves.)
"""

import ast
import os

from tests.kit.harness import KIT_ROOT, reference_source


def stub_source(exercise):
    """The reference of `exercise` (an id) with each function reduced to its docstring and the raise."""
    tree = ast.parse(reference_source(exercise))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            node.body = ([ast.Expr(ast.Constant(docstring))] if docstring is not None else []) + [
                ast.Raise(exc=ast.Name("NotImplementedError", ast.Load()), cause=None)]
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def exercise_ids():
    return sorted(f[:-3] for f in os.listdir(os.path.join(KIT_ROOT, "solutions")) if f.startswith("ex"))


def write_stubs(folder, exercises=None):
    """A folder of stubs (every exercise unless named); returns its path as a string."""
    os.makedirs(folder, exist_ok=True)
    for exercise in exercises or exercise_ids():
        with open(os.path.join(folder, f"{exercise}.py"), "w") as handle:
            handle.write(stub_source(exercise))
    return str(folder)
