import atexit
import os
import sys

from grader.preflight import missing

if __name__ == "__main__":  # workers re-import the main module: it must do nothing then
    problem = missing()
    if problem:
        print(f"python -m grader: error: {problem}", file=sys.stderr)
        sys.exit(2)
    from grader.cli import main  # reads no catalog: main() reads it first, and names a line that does not load
    from grader.sandbox import end_this_process_tree, own_this_process

    own_this_process()  # the grader's alone: its subreaper, its OOM score (a library's caller keeps its own)
    try:
        code = main()
    finally:
        end_this_process_tree()  # nothing it started outlives it, the resource tracker included
    # Everything is written. Skip the interpreter's teardown of torch's modules (over half a
    # second) but not the exit handlers.
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code or 0)
