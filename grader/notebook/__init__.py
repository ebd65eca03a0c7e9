"""Where the course is taught: exercises written and checked in Jupyter notebooks.

`cells` turns a notebook's code cells (a kernel's history, or an .ipynb file's) into the module
source the grader grades, the same for both."""
