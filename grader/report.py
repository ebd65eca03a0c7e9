"""The reports: the terminal table, JSON, Gradescope's results.json and a CSV summary.

Every file is written whole or not at all (a temporary file renamed into place), so a
crash or Ctrl-C never leaves a partial report that looks complete.
"""

import csv
import io
import json
import os
import tempfile



def terminal(result, verbose=False):
    lines = []
    width = max(len(r["id"]) for r in result["exercises"]) if result["exercises"] else 10
    lines.append(f"{'exercise':<{width}}  {'points':>13}  {'checks':>7}  {'devices':<9}  status")
    for row in result["exercises"]:
        points = f"{row['score']:g} / {row['max_score']:g}"
        lines.append(f"{row['id']:<{width}}  {points:>13}  {row['passed']:>3}/{row['total']:<3}  "
                     f"{','.join(row['devices']) or '-':<9}  {row['status']}")
    lines.append(f"{'total':<{width}}  {result['score']:g} / {result['max_score']:g}".rstrip())
    failures = [(row, check) for row in result["exercises"] for check in row["checks"] if check["status"] != "passed"]
    shown = [(row, check) for row, check in failures if verbose or not _repeats(row, check)]
    if shown:
        lines.append("")
    for row, check in shown:
        first, *rest = check["message"].splitlines() or [""]
        lines.append(f"{row['id']} {check['name']} [{check['device']}]: {check['status']}: {first}")
        lines += ["    " + line for line in rest]
    return "\n".join(lines)


def _repeats(row, check):
    """A stub or a missing file says the same on every check: show it once per exercise."""
    if row["status"] in ("not started", "missing", "error at import", "uses the reference solutions"):
        same = [c for c in row["checks"] if c["status"] == check["status"]]
        return same and same[0] is not check
    return False


def as_json(results):
    return results[0] if len(results) == 1 else {"submissions": results}


def gradescope(result):
    """Gradescope's results.json: one test per exercise, its failing checks as output."""
    tests = []
    for number, row in enumerate(result["exercises"], 1):
        output = "\n".join(f"{c['name']} [{c['device']}]: {c['status']}: {c['message']}"
                           for c in row["checks"] if c["status"] != "passed")
        tests.append({
            "name": f"{row['id']}: {row['title']}", "number": str(number), "score": row["score"],
            "max_score": row["max_score"], "status": "passed" if row["status"] == "passed" else "failed",
            "output": output or f"all {row['total']} checks passed", "visibility": "visible",
        })
    return {
        "score": result["score"], "execution_time": result["execution_time"],
        "output": f"{result['score']:g} / {result['max_score']:g} points; devices: {', '.join(result['devices'])}",
        "tests": tests,
    }


def summary_csv(results):
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    ids = [row["id"] for row in results[0]["exercises"]] if results else []
    writer.writerow(["target", "score", "max_score"] + ids)
    for result in results:
        writer.writerow([result["target"], result["score"], result["max_score"]] + [r["score"] for r in result["exercises"]])
    return buffer.getvalue()


def check_writable(path):
    """'' when a report can be written at path, else why not (checked before grading)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{path} is a folder"
    if not os.path.isdir(folder):
        return f"the folder {folder} does not exist"
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"{path} is not writable"
    return ""


def write(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".report-")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def write_json(path, data):
    write(path, json.dumps(data, indent=2) + "\n")


