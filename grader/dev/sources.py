"""The kit's Python files read, never imported: the check names of a check file, the uses of Hypothesis's own
`example`, the process-group checks left on MPS, the signatures of a stub's and a reference's functions, and
how much of a reference a stub's text gives away."""

import ast
import functools
import io
import re
import tokenize


@functools.lru_cache(maxsize=256)
def _tree(source: str) -> ast.Module:
    return ast.parse(source)


def parse(source: str, path: str) -> ast.Module:
    """`source`'s tree, parsed once for all its readers (dev check reads each check file, reference and stub several
    times): shared, so no reader may change it. A syntax error names `path`."""
    try:
        return _tree(source)
    except SyntaxError as error:
        error.filename = path
        raise


def check_names(path: str) -> list[str]:
    with open(path) as handle:
        return [node.name for node in parse(handle.read(), path).body
                if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]


def hypothesis_examples(source: str, path: str) -> list[str]:
    """Each use of Hypothesis's own `example` in a check file: the kit counts only its own (`grader.checks.example`)
    to tell an explicit example from a drawn input, so with Hypothesis's a failure would be reported as drawn."""
    tree = parse(source, path)
    modules = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names if alias.name == "hypothesis"}
    lines = sorted({node.lineno for node in ast.walk(tree)
                    if (isinstance(node, ast.ImportFrom) and node.module == "hypothesis"
                        and any(alias.name == "example" for alias in node.names))
                    or (isinstance(node, ast.Attribute) and node.attr == "example"
                        and isinstance(node.value, ast.Name) and node.value.id in modules)})
    return [f"{path}:{line}: uses Hypothesis's own example: import example from grader.checks instead (the reports "
            f"count only the kit's explicit examples)" for line in lines]


def late_docstrings(source: str, path: str) -> list[str]:
    """Each check whose sentence is a string statement after its first: Python takes only a first statement for the
    docstring, so the reports (Gradescope's included) would show the function's name instead of the sentence."""
    found = []
    for node in parse(source, path).body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        late = [statement for statement in node.body[1:] if isinstance(statement, ast.Expr)
                and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str)]
        if late:
            found.append(f"{path}:{late[0].lineno}: {node.name}'s docstring comes after other code: move it to the "
                         "function's first line (reports show the name where a check has no docstring)")
    return found


GROUP_CALLS = ("compare", "run", "reference")  # the Grade methods that take world_size=


def unmarked_group_checks(source: str, path: str) -> list[str]:
    """Each check that runs in a process group (a `grade.compare/run/reference(..., world_size=...)` call) on every
    device: gloo carries no MPS tensors, so such a check is `device_free` or marked `NEEDS_GLOO` (or
    `pytest.mark.not_on("mps", why=...)`)."""
    found = []
    for node in parse(source, path).body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        marks = [ast.unparse(decorator) for decorator in node.decorator_list]
        if any("device_free" in mark or "NEEDS_GLOO" in mark or ("not_on" in mark and "mps" in mark)
               for mark in marks):
            continue
        if any(isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in GROUP_CALLS
               and any(keyword.arg == "world_size" for keyword in call.keywords) for call in ast.walk(node)):
            found.append(f"{path}:{node.lineno}: {node.name} runs in a process group (world_size=) on every device: "
                         "mark it @NEEDS_GLOO (grader.checks; gloo carries no MPS tensors) or device_free")
    return found


def functions(path: str) -> dict[str, str]:
    """{name: signature text} of a module's public top-level functions; read, never imported."""
    with open(path) as handle:
        tree = parse(handle.read(), path)
    return {node.name: ast.unparse(node.args) + (f" -> {ast.unparse(node.returns)}" if node.returns else "")
            for node in tree.body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}


def _raises_not_implemented(statement: ast.stmt) -> bool:
    """`raise NotImplementedError(...)`: the placeholder a learner replaces, none of the reference's lines."""
    if not isinstance(statement, ast.Raise) or statement.exc is None:
        return False
    raised = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
    return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"


def body_lines(path: str) -> list[str]:
    """The lines of the bodies of a module's top-level functions (and its classes' methods) that are code, in
    order, stripped, a trailing comment cut off: not blank, not a comment, not a docstring, not a top-level
    `raise NotImplementedError` (a stub's placeholder), not a line of brackets alone."""
    with open(path) as handle:
        source = handle.read()
    lines, tree, counted = source.splitlines(), parse(source, path), set()
    functions = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    functions += [item for node in tree.body if isinstance(node, ast.ClassDef) for item in node.body
                  if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for function in functions:
        docstrings = {id(node.body[0]) for node in ast.walk(function)
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
                      and isinstance(node.body[0].value.value, str)}
        for statement in function.body:
            if id(statement) in docstrings or _raises_not_implemented(statement):
                continue
            skip = {n for node in ast.walk(statement) if isinstance(node, ast.stmt) and id(node) in docstrings
                    for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)}  # a nested docstring
            counted |= {n for n in range(statement.lineno, (statement.end_lineno or statement.lineno) + 1)
                        if n not in skip}
    comments = {token.start[0]: token.start[1] for token in tokenize.generate_tokens(io.StringIO(source).readline)
                if token.type == tokenize.COMMENT}
    code = [lines[n - 1][:comments.get(n)].strip() for n in sorted(counted)]
    return [line for line in code if re.search(r"\w", line)]


def _uncommented(line: str) -> str:
    """A line of a stub as the measure reads it: stripped, a leading `# ` removed."""
    line = line.strip()
    return line[1:].strip() if line.startswith("#") else line


def given_away(stub: str, reference: str) -> list[str]:
    """The reference's lines of code (body_lines) that occur anywhere in the stub's text, its comments,
    docstrings and examples included: as a substring not inside a longer name (`enable()` is not in
    `model.gradient_checkpointing_enable()`, `return x` is not in `return x_hat`)."""
    with open(stub) as handle:
        text = "\n".join(_uncommented(line) for line in handle.read().splitlines())
    return [line for line in body_lines(reference) if re.search(rf"(?<![\w.]){re.escape(line)}(?!\w)", text)]

