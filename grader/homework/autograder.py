"""`python -m grader autograder OUT.zip`: the kit as a Gradescope autograder.

The zip holds what Gradescope asks for at its root, `setup.sh` (run once, as root, from
/autograder/source where the zip is unpacked, when the autograder image is built: a venv with CPU
torch and the kit) and `run_autograder` (copied to /autograder/run_autograder and run from
/autograder for every submission: it finds the kit in /autograder/source/kit, or beside itself),
and the kit itself, solutions included, under `kit/`. Each submission is
normalised (oddly named files, sub-folders), graded with the thorough profile and a seed chosen
when the bundle is built (secret: students never see the bundle), within a total `--budget` under
Gradescope's job limit, and `results.json` is always written: when the grader itself fails, it
says the autograder failed, not the student. The seed is in `kit/.grading-seed`, readable by
root alone, never on a command line any process may read in `/proc`.
"""

import argparse
import os
import random
import shlex
import stat
import zipfile
from collections.abc import Iterator, Sequence

from grader import catalog
from grader.grading import versions
from grader.kit import Kit
from grader.reports import details
from grader.reports.report import FORMATS, VISIBILITIES
from grader.usage import command_parser, positive

KIT_FILES = ("pyproject.toml", "conftest.py", "README.md")
KIT_FOLDERS = ("grader", "solutions", "exercises")
SEED_FILE = ".grading-seed"  # in kit/: the secret seed, root's alone (mode 600)
BUDGET = 480.0  # seconds all of a submission's checks may take: under Gradescope's default 10 min job limit

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, from /autograder/source (the zip unpacked) when it builds the autograder's
# image: a venv of the image's python3 (3.10 to 3.13) with CPU torch and the kit, at the versions pinned in
# kit/constraints.txt. AUTOGRADER_ROOT (default /autograder) is where the venv goes, as run_autograder reads it;
# GRADER_TORCH_INDEX, when set, is the index torch comes from instead of PyTorch's CPU one (a mirror).
set -euxo pipefail
cd "$(dirname "$0")"
root=${AUTOGRADER_ROOT:-/autograder}
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10) and "setup.sh: the kit needs Python 3.10 or newer")'
if ! python3 -m venv "$root/venv"; then
    apt-get update && apt-get install -y --no-install-recommends python3-venv python3-pip
    rm -rf "$root/venv" && python3 -m venv "$root/venv"
fi
pip=$root/venv/bin/pip
"$pip" install --upgrade pip
# torch alone from the CPU index (no CUDA libraries), at its pinned version; what it requires comes next
# (pip takes the last --index-url given: GRADER_TORCH_INDEX's, when set)
"$pip" install --no-deps -c kit/constraints.txt torch --index-url https://download.pytorch.org/whl/cpu \\
    ${GRADER_TORCH_INDEX:+--index-url "$GRADER_TORCH_INDEX"}
if ! "$pip" install -c kit/constraints.txt ./kit; then
    echo "setup.sh: the pins of kit/constraints.txt do not all install on $(python3 -V) (the zip was built on" \\
         "another Python): installing the kit's own version ranges; each report names what differs" >&2
    "$pip" install ./kit
fi
"""

RUN = """#!/usr/bin/env bash
# Gradescope copies this to /autograder/run_autograder when it builds the image and runs it from /autograder
# for every submission: grade /autograder/submission into /autograder/results/results.json, which is written
# whatever happens. The kit is beside this script (run from the unpacked zip) or in /autograder/source/kit.
root=${{AUTOGRADER_ROOT:-/autograder}}
python=${{GRADER_PYTHON:-$root/venv/bin/python}}
results=$root/results/results.json
mkdir -p "$root/results"
rm -f "$results"
failed() {{  # the autograder's own failure, never the student's: said in results.json ($1), and exit 0
    echo "run_autograder: the autograder itself failed: $1${{2:+: $2}}" >&2
    cat > "$results" <<JSON
{{"score": 0, "tests": [], "extra_data": {{"autograder_failed": true}},
 "output": "The autograder itself failed ($1), not your submission; it will be regraded."}}
JSON
    exit 0
}}
here=$(dirname "$0")
kit=
for candidate in "$here/kit" "$root/source/kit"; do
    if [ -f "$candidate/{seed_file}" ]; then kit=$candidate; break; fi
done
[ -n "$kit" ] || failed "its kit is missing" "neither $here/kit nor $root/source/kit holds it (a broken zip?)"
cd "$kit" || failed "its kit cannot be entered" "$kit"
chmod 600 {seed_file}
HF_HUB_OFFLINE=1 "$python" -m grader --target "$root/submission" --gradescope "$results" \\
    --profile thorough --seed-file {seed_file} --timeout {timeout:g} --budget {budget:g} \\
    --visibility {visibility} --hidden-visibility {hidden_visibility} --gradescope-format {output_format} {extra}
status=$?
[ -s "$results" ] || failed "exit status $status"
exit 0
"""


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("autograder", "Build a Gradescope autograder zip of the kit.")
    parser.add_argument("out", metavar="OUT.zip")
    parser.add_argument("--visibility", choices=VISIBILITIES, default="visible",
                        help="when students see each public check's result (Gradescope's test visibility)")
    parser.add_argument("--hidden-visibility", choices=VISIBILITIES, default="after_due_date",
                        help="when students see each hidden check's result (default after_due_date)")
    parser.add_argument("--gradescope-format", "--format", dest="format", choices=FORMATS, default="md",
                        help="each check's output on Gradescope: md (code blocks) or text (the grader's own "
                             "--gradescope-format, which the bundle passes on)")
    parser.add_argument("--failure-details", action="append", default=[], type=details.option, metavar="[KEY=]LEVEL",
                        help="how much of a public check's failure students see: full, value or none; KEY chapter.N "
                             "or EXERCISE_ID.CHECK for those alone; over the catalog's [failure-details]; repeatable")
    parser.add_argument("--seed", type=int, default=None, help="the grading seed (default: a secret random one)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one check may run")
    parser.add_argument("--budget", type=positive, default=BUDGET, metavar="SECONDS",
                        help=f"seconds all of one submission's checks may take together, each exercise an even "
                             f"share of what is left (default {BUDGET:g}: Gradescope stops a job at 10 minutes unless "
                             "told otherwise)")
    parser.add_argument("--require-sandbox", action="store_true",
                        help="refuse to grade where Gradescope's kernel lacks a sandbox layer")
    parser.add_argument("--chapter", type=int, default=None, metavar="N",
                        help="grade chapter N's exercises only: one homework assignment of 100 points")
    return parser


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    chapter = None if args.chapter is None else catalog.find_chapter(args.chapter)
    if args.chapter is not None and (chapter is None or not chapter.exercises):
        parser.error(f"--chapter {args.chapter}: " + ("has no exercises" if chapter else
                     catalog.unknown(f"chapter{args.chapter}")))
    if not args.out.endswith(".zip"):
        parser.error("OUT must end in .zip")
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder):
        parser.error(f"the folder {folder} does not exist")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    extra = " ".join(([chapter.name] if chapter else []) + (["--require-sandbox"] if args.require_sandbox else [])
                     + [f"--failure-details {shlex.quote(spec)}" for spec in args.failure_details])
    build(args.out, RUN.format(seed_file=SEED_FILE, timeout=args.timeout, budget=args.budget,
                               visibility=args.visibility, hidden_visibility=args.hidden_visibility,
                               output_format=args.format, extra=extra), seed)
    differ = versions.lock_differences()
    if differ:
        print(f"note: the zip pins this environment's versions, which differ from the kit's {versions.LOCK} (the set "
              f"its CI proves) in: {'; '.join(differ)}")
    graded = f"chapter {chapter.number} ({chapter.topic})" if chapter else "every chapter"
    print(f"wrote {args.out}: upload it as the autograder (Ubuntu base image); grades {graded}; grading seed {seed}")
    return 0


def build(out: str, run_script: str, seed: int) -> None:
    kit = Kit.default()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bundle:
        _add_text(bundle, "setup.sh", SETUP, executable=True)
        _add_text(bundle, "run_autograder", run_script, executable=True)
        _add_text(bundle, f"kit/{SEED_FILE}", f"{seed}\n", mode=0o600)
        _add_text(bundle, f"kit/{versions.CONSTRAINTS}", versions.constraints_text(kit.root))
        for name in KIT_FILES:
            bundle.write(kit.path(name), f"kit/{name}")
        for path in _kit_paths(kit):
            bundle.write(kit.path(path), f"kit/{path}")


def _kit_paths(kit: Kit) -> Iterator[str]:
    for folder in KIT_FOLDERS:
        for root, folders, files in os.walk(kit.path(folder)):
            folders[:] = sorted(f for f in folders if f != "__pycache__" and not f.startswith("."))
            for name in sorted(files):
                if not name.endswith((".pyc", ".log")):
                    yield os.path.relpath(os.path.join(root, name), kit.root)
    tests = kit.checks
    for name in sorted(os.listdir(tests)):
        if name.startswith("test_ex") and name.endswith(".py"):
            yield os.path.join("tests", name)


def _add_text(bundle: zipfile.ZipFile, name: str, text: str, executable: bool = False, mode: int | None = None) -> None:
    info = zipfile.ZipInfo(name)
    info.external_attr = ((mode or (0o755 if executable else 0o644)) | stat.S_IFREG) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    bundle.writestr(info, text)
