"""A static scan of a submission for code that reaches for the grader's machinery.

What a probe measures inside a worker shares a process with the code under test, which could
in principle rewrite it: the kernel keeps a submission in its box, not honest inside it. So,
as kernel-grading leaderboards do, each submission's source is read (never run) for the tools
such tampering needs, and the lines found are flagged for a person to review. A flag changes
no score: exercises that legitimately use one of these tools are rare, and say why.
"""

import ast
import os
from collections.abc import Iterable

from grader.records import ReviewFlag

# Larger files are flagged as such, not parsed: the grading process parses the rest, and Python's parser builds up to
# a kilobyte of tree a byte of code (an exercise's file is a few kilobytes).
MAX_BYTES = 64 * 1024
MODULES = {
    "gc": "walks the interpreter's objects (gc)",
    "ctypes": "calls C directly (ctypes)",
    "grader": "imports the grader's own modules",
    "signal": "sends or handles signals",
    "inspect": "inspects the caller's frames (inspect)",
    "multiprocessing": "reaches for the worker's process machinery (multiprocessing)",
    "_posixsubprocess": "starts processes below subprocess",
    "pickle": "builds pickles (the reply channel's format)",
    "importlib": "loads modules by hand (importlib)",
    "socket": "opens sockets",
    "builtins": "patches builtins",
}
CALLS = {
    "_getframe": "reads interpreter frames (sys._getframe)",
    "settrace": "traces the interpreter (sys.settrace)",
    "setprofile": "profiles the interpreter (sys.setprofile)",
    "addaudithook": "adds an audit hook",
    "kill": "sends a signal (os.kill)",
    "killpg": "sends a signal (os.killpg)",
    "write": None,  # os.write: only on a file descriptor number, see below
    "dup2": "rewires file descriptors (os.dup2)",
    "fork": "forks the worker",
    "__import__": "imports by name at run time (__import__)",
    "import_module": "imports by name at run time (importlib.import_module)",
}
# Names built at run time escape every list above: code run from a string, a module or an attribute reached
# by a name computed when the code runs. Each is flagged wherever it appears.
BUILT_AT_RUN_TIME = {
    "exec": "runs code built at run time (exec)",
    "eval": "runs code built at run time (eval)",
    "compile": "compiles code built at run time (compile)",
}
BY_NAME = ("getattr", "setattr", "delattr", "hasattr")
# What leads from an object to the code and names around it (another module's globals, a caller's frame),
# written as an attribute or as getattr's literal.
INTERNALS = {"__globals__", "__closure__", "__code__", "__builtins__", "__subclasses__", "f_back", "f_globals",
             "f_locals", "gi_frame", "tb_frame"}
SYS_REACHING = {"modules", "__dict__"}  # sys's attributes that lead to every module
STRINGS = {
    "/proc": "names /proc",
    "solutions": "names the reference solutions",
    "grader": "names the grader",
    "/dev/fd": "names file descriptors",
}


def folder(path: str, exercises: Iterable[str]) -> list[ReviewFlag]:
    """Flags for the exercise files of one submission folder (the files of `exercises` only)."""
    flags = []
    for exercise in exercises:
        file = os.path.join(path, exercise + ".py")
        if os.path.isfile(file) and not os.path.islink(file):
            flags += source(file)
    return flags


def source(file: str) -> list[ReviewFlag]:
    name = os.path.basename(file)
    try:
        if os.path.getsize(file) > MAX_BYTES:
            return [ReviewFlag(name, 0, f"larger than {MAX_BYTES:,} bytes: not scanned")]
        with open(file, "rb") as handle:
            tree = ast.parse(handle.read(), filename=name)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # it fails at import anyway; nothing of it runs
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    flags = []
    sys_names = _sys_names(tree)
    read_from = _read_from(tree, sys_names)
    libraries = _library_names(tree)
    for node in ast.walk(tree):
        reason = None if id(node) in docstrings else (_reason(node) or _reaches_sys(node, sys_names, read_from)
                                                       or _patches(node, libraries))
        if reason:
            flags.append(ReviewFlag(name, getattr(node, "lineno", 0), reason))
    return sorted(set(flags), key=lambda flag: flag.line)


def _sys_names(tree: ast.AST) -> set[str]:
    """The names the sys module is bound to: `import sys [as s]`, and `from os import sys [as s]` (any module's)."""
    names = {"sys"}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name for alias in node.names if alias.name == "sys"}
    return names


def _library_names(tree: ast.AST) -> set[str]:
    """The names bound to what an import gave (`import torch`, `from torch import nn`, `import torch.nn as nn`),
    and to anything reached from one (`T = torch.Tensor`), wherever bound: the objects a patch would change for
    the whole worker."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*"}
    bindings = [node for node in ast.walk(tree) if isinstance(node, ast.Assign)]
    while True:
        more = {target.id for node in bindings if _root(node.value) in names
                for target in node.targets if isinstance(target, ast.Name)} - names
        if not more:
            return names
        names |= more


def _root(node: ast.AST) -> str | None:
    """The name an attribute chain starts from (`torch` of `torch.nn.Module.__call__`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _patches(node: ast.AST, libraries: set[str]) -> str | None:
    """An attribute of an imported library set or deleted (`torch.equal = ...`, `setattr(nn.Module, "__call__", f)`):
    a patch seen by every later call in the worker, the kit's probes' included. torch.backends' settings
    (`torch.backends.cudnn.benchmark = True`) are the documented way to configure it, not a patch."""
    targets: list[ast.AST] = []
    if isinstance(node, (ast.Assign, ast.Delete)):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") \
            and node.args and _root(node.args[0]) in libraries:
        return f"patches a library it imported ({node.func.id} on {ast.unparse(node.args[0])})"
    elif isinstance(node, ast.Attribute) and node.attr in ("__setattr__", "__delattr__"):
        return f"sets attributes by hand ({node.attr})"
    while targets:
        target = targets.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            targets += target.elts
        elif isinstance(target, ast.Starred):
            targets.append(target.value)
        elif isinstance(target, ast.Attribute) and _root(target) in libraries and \
                not ast.unparse(target).startswith("torch.backends."):
            return f"patches a library it imported ({ast.unparse(target)} set)"
    return None


def _read_from(tree: ast.AST, sys_names: set[str]) -> set[int]:
    """The sys names used only to read one of its attributes (`sys.path`, `sys.stderr`), by node id."""
    return {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute) and
            isinstance(node.value, ast.Name) and node.value.id in sys_names and node.attr not in SYS_REACHING}


def _reaches_sys(node: ast.AST, sys_names: set[str], read_from: set[int]) -> str | None:
    """sys.modules by another route than `sys.modules`: another module's `os.sys`, or the sys module handed on
    as a value (`vars(sys)`, `getattr(sys, ...)`, `s = sys`), which leaves every later use out of sight."""
    if isinstance(node, ast.Attribute) and node.attr == "sys":
        return f"reaches the sys module through another module ({ast.unparse(node)})"
    if isinstance(node, ast.Attribute) and node.attr in SYS_REACHING and isinstance(node.value, ast.Name) and \
            node.value.id in sys_names:
        return f"reaches modules by name at run time (sys.{node.attr})"
    if isinstance(node, ast.Name) and node.id in sys_names and isinstance(node.ctx, ast.Load) and \
            id(node) not in read_from:
        return "handles the sys module as a value (vars, getattr, another name): reaches sys.modules unseen"
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in ("modules",
                                                                                                          "sys"):
        return f"reaches modules by name at run time ([{node.slice.value!r}])"
    return None


def _reason(node: ast.AST) -> str | None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            root = alias.name.split(".")[0]
            if root in MODULES:
                return MODULES[root]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        root = node.module.split(".")[0]
        if root in MODULES:
            return MODULES[root]
        if root == "sys" and any(alias.name in CALLS for alias in node.names):
            return CALLS[next(alias.name for alias in node.names if alias.name in CALLS)]
    if isinstance(node, ast.Attribute) and node.attr in CALLS:
        if node.attr == "write":
            return None
        return CALLS[node.attr]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "write":
        if isinstance(node.func.value, ast.Name) and node.func.value.id == "os":
            return "writes to a raw file descriptor (os.write)"
    if isinstance(node, ast.Name) and node.id == "__import__":
        return CALLS["__import__"]
    if isinstance(node, ast.Name) and node.id in BUILT_AT_RUN_TIME:
        return BUILT_AT_RUN_TIME[node.id]
    if isinstance(node, ast.Attribute) and node.attr == "modules" and isinstance(node.value, ast.Name) \
            and node.value.id == "sys":
        return "reaches modules by name at run time (sys.modules)"
    if isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name == "modules" for a in node.names):
        return "reaches modules by name at run time (sys.modules)"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BY_NAME:
        name = node.args[1] if len(node.args) > 1 else None
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            return f"reaches an attribute by a name built at run time ({node.func.id})"
        if name.value in INTERNALS:
            return f"reaches interpreter internals ({name.value})"
    if isinstance(node, ast.Attribute) and node.attr in INTERNALS:
        return f"reaches interpreter internals ({node.attr})"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        for needle, reason in STRINGS.items():
            if needle in node.value:
                return reason
    return None
