"""Notebooks: a notebook's code cells as the module the grader grades (`cells`, the same for a
kernel's history and an .ipynb file), where in a cell a line of that module came from (`places`,
which a worker uses to name the learner's cell in an error), a notebook as the exercise files it
stands for (`export`), and the chapter notebooks made from the stubs (`build`). Below grading: it
imports only the catalog and the command line's parser, so that grading may read a notebook handed
in; `check()` in a kernel, which grades, is `grader.learner.check`."""
