import sys

from grader.cli import main

if __name__ == "__main__":  # workers re-import the main module: it must do nothing then
    sys.exit(main())
