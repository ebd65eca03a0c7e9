"""The kit as an object (grader.kit.Kit): a kit of two exercises built beside the real one, each asked for its
exercises and files, and both graded one after the other in one process, each with its own catalog, check
files and references."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from grader.kit import Kit
from tests.kit.harness import KIT_ROOT, SEED

SMALL = ("ex04_sharding", "ex19_quantize_blockwise")
SMALL_TITLE = "Shard the data, in the small kit"  # the small kit's own catalog says so; the real one does not
SMALL_ONLY = '''

def test_only_in_the_small_kit(grade):
    """A check only the small kit's check file has."""
'''

GRADE_BOTH = """
import json, sys
from grader.grading import engine
from grader.grading.options import Options
from grader.grading.session import resolve_target
from grader.kit import Kit

small, seed = Kit(sys.argv[1]), int(sys.argv[2])
found = {}
for name, kit, exercises in (("small", small, small.catalog.exercises),
                             ("real", Kit.default(), engine.exercises_named(["ex04"], Kit.default()))):
    options = Options(targets=(resolve_target("solutions", kit),), profile="fast", seed=seed)
    result = engine.grade(engine.Request(tuple(exercises), options, device="cpu", kit=kit)).results[0]
    found[name] = [dict(id=row.id, title=row.title, status=row.status.name, points=row.max_score,
                        checks=sorted({check.check for check in row.checks})) for row in result.exercises]
print(json.dumps(found))
"""


def small_catalog():
    """The real catalog's preloads and chapters, and SMALL's entries alone, ex04 under a title of its own."""
    with open(os.path.join(KIT_ROOT, "grader", "catalog.toml")) as handle:
        text = handle.read()
    head, *entries = re.split(r"(?m)^\[\[exercise\]\]\n", text)
    kept = [entry for entry in entries if re.match(r'id = "(\w+)"', entry).group(1) in SMALL]
    kept[0] = re.sub(r'(?m)^title = .*$', f'title = "{SMALL_TITLE}"', kept[0], count=1)
    return head + "".join("[[exercise]]\n" + entry for entry in kept)


def small_kit(folder):
    """A kit of SMALL alone in `folder`: their references, stubs and check files, the kit's pytest settings, and
    a catalog.toml of its own."""
    for name in ("tests", "solutions", "exercises"):
        (folder / name).mkdir(parents=True)
    for exercise in SMALL:
        for path in Kit.default().files(exercise).all()[:3]:
            shutil.copy(path, folder / os.path.relpath(path, KIT_ROOT))
    with open(folder / "tests" / f"test_{SMALL[0]}.py", "a") as handle:
        handle.write(SMALL_ONLY)
    for name in ("pyproject.toml", "conftest.py"):  # pytest's settings, and the plugin that grades
        shutil.copy(os.path.join(KIT_ROOT, name), folder / name)
    (folder / "catalog.toml").write_text(small_catalog())
    return Kit(str(folder))


def test_a_kit_of_its_own_knows_only_its_exercises_and_files(tmp_path):
    small = small_kit(tmp_path / "small")
    assert [e.id for e in small.catalog.exercises] == list(SMALL)
    assert [c.number for c in small.catalog.chapters if c.exercises] == [1, 4]
    assert small.catalog.get("ex04_sharding").title == SMALL_TITLE
    assert small.catalog.find("ex05") is None
    assert small.catalog.unknown("ex05") == "unknown exercise 'ex05' (known: ex04_sharding, ex19_quantize_blockwise)"
    assert small.checks_file("ex04_sharding") == str(tmp_path / "small" / "tests" / "test_ex04_sharding.py")
    assert small.reference_file("ex19_quantize_blockwise") == str(tmp_path / "small" / "solutions" /
                                                                  "ex19_quantize_blockwise.py")
    assert small.check_files() == [str(tmp_path / "small" / "tests" / f"test_{e}.py") for e in SMALL]
    real = Kit.default()
    assert real.root == KIT_ROOT and real.catalog.find("ex05") is not None
    assert real.catalog.get("ex04_sharding").title != SMALL_TITLE
    assert real.checks_file("ex04_sharding") == os.path.join(KIT_ROOT, "tests", "test_ex04_sharding.py")
    assert real.catalog is Kit(KIT_ROOT).catalog  # one catalog file, read once a process


@pytest.mark.slow
def test_two_kits_are_graded_one_after_the_other_in_one_process(tmp_path):
    """The small kit first, then the real one, in one grader process: each result lists its own kit's exercises,
    titles and checks (the small kit's extra check stays out of the real kit's ex04)."""
    small = small_kit(tmp_path / "small")
    done = subprocess.run([sys.executable, "-c", GRADE_BOTH, small.root, SEED], cwd=KIT_ROOT, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, HF_HUB_OFFLINE="1", GRADER_STATE=os.devnull,
                                                           PYTHONPATH=KIT_ROOT))
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert [row["id"] for row in found["small"]] == list(SMALL), found
    assert all(row["status"] == "PASSED" for row in found["small"] + found["real"]), found
    small_ex04, real_ex04 = found["small"][0], found["real"][0]
    assert [row["id"] for row in found["real"]] == ["ex04_sharding"], found
    assert small_ex04["title"] == SMALL_TITLE and real_ex04["title"] != SMALL_TITLE, found
    assert "test_only_in_the_small_kit" in small_ex04["checks"], found
    assert "test_only_in_the_small_kit" not in real_ex04["checks"], found
    assert set(small_ex04["checks"]) - {"test_only_in_the_small_kit"} == set(real_ex04["checks"]), found
