"""Helpers for the kit's own tests: write submissions, grade them in one grader call, read the JSON."""

import json
import os
import subprocess
import sys
import textwrap

KIT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEED = os.environ.get("KIT_SEED", "20261202")  # KIT_SEED=N replays the kit under another seed


def reference_source(exercise):
    with open(os.path.join(KIT_ROOT, "solutions", exercise + ".py")) as handle:
        return handle.read()


def mutate(exercise, *replacements):
    """The reference's source with (old, new) replacements: a realistic near-miss."""
    source = reference_source(exercise)
    for old, new in replacements:
        assert old in source, f"{old!r} is not in solutions/{exercise}.py"
        source = source.replace(old, new)
    return source


def grader(*args, timeout=1800, env=None):
    """Run `python -m grader ARGS` from the kit root; returns the CompletedProcess."""
    environment = dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull)
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=KIT_ROOT, capture_output=True, text=True,
                          timeout=timeout, env=environment)


def grade_submissions(tmp_path, exercise, submissions, *args, profile="thorough", device="cpu"):
    """Grade {name: source of exercise's module} in one call; returns {name: that target's result}."""
    root = tmp_path / "submissions"
    for name, source in submissions.items():
        folder = root / name
        folder.mkdir(parents=True)
        (folder / f"{exercise}.py").write_text(textwrap.dedent(source))
    report = tmp_path / "report.json"
    done = grader(exercise, "--submissions", str(root), "--json", str(report), "--seed", SEED,
                  "--profile", profile, "--device", device, "-q", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(report.read_text())
    results = data["submissions"] if "submissions" in data else [data]
    return {os.path.basename(r["target"]): r for r in results}


def assert_caught_on_a_gpu(tmp_path, exercise, on_a_gpu):
    """{name: (source, check)} of mistakes only a GPU shows: graded on cuda, each caught by its check.
    The caller skips (never passes) where there is no GPU."""
    results = grade_submissions(tmp_path, exercise, {name: source for name, (source, _) in on_a_gpu.items()},
                                device="cuda")
    assert_caught(results, {name: check for name, (_, check) in on_a_gpu.items()})


def failed_checks(result):
    """{check name: message} of the checks that did not pass."""
    return {c["name"]: c["message"] for e in result["exercises"] for c in e["checks"] if c["status"] != "passed"}


def assert_caught(results, expected):
    """Every wrong submission scores below full, and the named check is among those failed."""
    problems = []
    for name, check in expected.items():
        result = results[name]
        failed = failed_checks(result)
        if result["score"] >= result["max_score"]:
            problems.append(f"{name}: scored full marks")
        elif check and check not in failed:
            problems.append(f"{name}: {check} passed (failed: {sorted(failed)})")
    assert not problems, "\n".join(problems)


def assert_diagnosed(results, expected):
    """{name: (check, text)}: that check failed for that submission, and its message holds the text."""
    problems = []
    for name, (check, text) in expected.items():
        message = failed_checks(results[name]).get(check)
        if message is None:
            problems.append(f"{name}: {check} passed")
        elif text not in message:
            problems.append(f"{name}: {check}'s message lacks {text!r}:\n{message}")
    assert not problems, "\n".join(problems)


def assert_full_marks(results, names):
    """Right implementations written otherwise than the references: every check passes."""
    wrongly_failed = {name: failed_checks(results[name]) for name in names
                      if results[name]["score"] < results[name]["max_score"]}
    assert not wrongly_failed, wrongly_failed
