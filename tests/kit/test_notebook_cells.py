"""A notebook's cells as the module the grader grades (grader.notebook.cells): definitions only."""

from grader.notebook.cells import defined_names, module_source


def test_definitions_are_kept_and_actions_dropped():
    source = module_source([
        "import torch\n%matplotlib inline\nEPS = 1e-8\nx = torch.zeros(3)\nprint(x)",
        "import functools\n@functools.lru_cache()\ndef f(a):\n    # a comment\n    return a + EPS\nf(1)",
        "while True:\n    pass",  # a cell that hangs in the kernel costs nothing where the module is imported
        "raise RuntimeError('a cell that raises')",
        "class Model:\n    pass",
    ])
    assert "import torch" in source and "EPS = 1e-8" in source and "x = torch.zeros(3)" not in source
    assert "@functools.lru_cache()\ndef f(a):\n    # a comment\n    return a + EPS" in source
    assert "while True" not in source and "raise" not in source and "print" not in source and "f(1)" not in source
    assert defined_names(source) == {"f", "Model"}
    compile(source, "<notebook>", "exec")


def test_a_later_definition_comes_after_an_earlier_one_as_in_the_kernel():
    source = module_source(["def f():\n    return 1", "def f():\n    return 2"])
    namespace = {}
    exec(compile(source, "<notebook>", "exec"), namespace)
    assert namespace["f"]() == 2


def test_magics_shell_lines_broken_cells_and_the_grader_are_left_out():
    source = module_source(["!pip install torch\ndef f():\n    return 1", "%%bash\nls", "def broken(:",
                            "%%time\ndef g():\n    return 2", "from grader import check\nimport grader\ncheck('ex04')"])
    assert defined_names(source) == {"f", "g"}
    assert "pip" not in source and "ls" not in source.split() and "grader" not in source
    assert module_source([]) == "" and module_source(["print(1)"]) == ""
