"""`python -m grader dev`: dev check (the kit against itself, run on copies of the kit with known faults),
dev new (an exercise's four files and catalog entry) and dev update (the generated blocks: the course map and the
exercise table from the catalog, the CLI reference from the parsers, wherever their markers are).

What dev reports and writes is tested in this process: `grader.dev.main([...], kit=Kit(copy))`, its output read
with capsys, on a copy of what dev reads of the kit (the catalog, the references, the check and catches files,
README.md and docs/*.md, stubs made from the references). Three tests start a grader process, where the process is
the subject: one usage error (exit status 2 and one line from the real command line, no traceback), and the two that
grade (`dev check` without --no-grade: a grade runs the kit's checks in workers, on a whole copy of the kit; the
second's subject is what a fork server forked from the grader inherits of its descriptors)."""

import argparse
import ast
import os
import shutil
import subprocess

try:
    import tomllib  # novm: tomli below
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest

from grader import layout
from grader.dev import blocks
from grader.dev import main as dev_main
from grader.kit import Kit
from tests.kit.harness import KIT_ROOT, SEED, grader, reference_source
from tests.kit.stubs import write_stubs

TABLE_END = blocks.TABLE.markers[1]
READ = ("solutions", "tests", layout.CATCHES)  # the folders whose files dev reads (of tests/: its check files)


def kit_copy(folder, whole=False):
    """What dev reads of the kit in `folder`, with stubs made from the references as its exercises/; with `whole`,
    the whole kit (the grader package and the kit's tests included), for a grader started in it."""
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis")
    if whole:
        for name in ("grader", "solutions", "tests", "docs"):
            if os.path.isdir(os.path.join(KIT_ROOT, name)):
                shutil.copytree(os.path.join(KIT_ROOT, name), folder / name, ignore=ignore)
        for name in ("README.md", "pyproject.toml", "conftest.py"):
            shutil.copy(os.path.join(KIT_ROOT, name), folder / name)
    else:
        for name in READ:
            source = os.path.join(KIT_ROOT, name)
            (folder / name).mkdir(parents=True, exist_ok=True)
            for file in os.listdir(source):
                if file.endswith(".py") and os.path.isfile(os.path.join(source, file)):
                    shutil.copyfile(os.path.join(source, file), folder / name / file)
        for name in ("grader/catalog.toml", *blocks.places(KIT_ROOT)):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(os.path.join(KIT_ROOT, name), folder / name)
    write_stubs(folder / "exercises")
    (folder / "exercises" / "__init__.py").write_text("")
    return with_cli_reference(folder)


def with_cli_reference(folder):
    """The copy's CLI reference made from its parsers (in docs/cli.md, with its markers, where no file has them):
    these tests start from a kit whose generated blocks are all up to date; `dev check` on the kit itself says
    whether its own is."""
    if not blocks.locate([blocks.CLI], str(folder))[0]:
        (folder / "docs").mkdir(exist_ok=True)
        (folder / "docs" / "cli.md").write_text("# Command-line reference\n\n" + "\n".join(blocks.CLI.markers) + "\n")
    derived, problems = blocks.derive(blocks.cli_maker(), str(folder))
    assert not problems, problems
    for file in derived:
        (folder / file.path).write_text(file.wanted)
    return folder


def holding(folder, block):
    """The file of the copy (relative to it) that holds the block's markers."""
    return blocks.locate([block], str(folder))[0][block]


def dev(capsys, folder, *args, command=dev_main):
    """`python -m grader dev ARGS` (or another command's main, hint's) on the kit in `folder`, in this process: its
    exit status and output."""
    capsys.readouterr()
    status = command(list(args), kit=Kit(str(folder)))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["dev", *args], status, out, err)


def dev_check(capsys, folder, *args):
    return dev(capsys, folder, "check", *args)


def refused(capsys, folder, *args):
    """The one line of stderr of a dev command on the kit in `folder` that is a usage error (exit status 2, no
    output)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        dev_main(list(args), kit=Kit(str(folder)))
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and not out, (args, out, err)
    assert len(err.strip().splitlines()) == 1, (args, err)
    return err


def lines_under(output, section):
    """The problem lines `dev check` printed under a section ("FAIL  points: ..." and the indented lines below)."""
    lines, inside = [], False
    for line in output.splitlines():
        if not line.startswith(" "):
            inside = line.split(":")[0].split(None, 1)[-1] == section
        elif inside:
            lines.append(line.strip())
    return lines


def test_dev_check_names_each_fault_in_the_files_the_catalog_and_the_readme(tmp_path, capsys):
    kit = kit_copy(tmp_path / "kit")
    clean = dev_check(capsys, kit, "--no-grade")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "dev check: all good" in clean.stdout
    table = holding(kit, blocks.TABLE)
    readme = (kit / table).read_text()
    assert "| ex04_sharding | 15 |" in readme
    (kit / table).write_text(readme.replace("| ex04_sharding | 15 |", "| ex04_sharding | 10 |"))
    (kit / "solutions" / "ex08_extra.py").write_text("")
    (kit / layout.files("ex03_prepare_model").catches).unlink()
    stub = kit / "exercises" / "ex06_parameter_sync.py"
    stub.write_text(stub.read_text().replace("src: int=0", "src: int=1"))
    catches = kit / layout.files("ex06_parameter_sync").catches  # no wrong implementation left for the in-place check
    catches.write_text(catches.read_text().replace('"test_broadcast_parameters_updates_tensors_in_place"',
                                                   '"test_broadcast_parameters_copies_src_state_to_every_rank"'))
    checks = kit / "tests" / "test_ex04_sharding.py"  # Hypothesis's own example: the reports would not count it
    checks.write_text(checks.read_text().replace("from hypothesis import given\n",
                                                 "from hypothesis import example, given\n"))
    done = dev_check(capsys, kit, "--no-grade")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    for problem in (f"{table} gives ex04_sharding 10 points; the catalog 15: run python -m grader dev update",
                    "tests/test_ex04_sharding.py:12: uses Hypothesis's own example: import example from grader.checks "
                    "instead (the reports count only the kit's explicit examples)",
                    "solutions/ex08_extra.py: no catalog entry",
                    f"ex03_prepare_model: {layout.files('ex03_prepare_model').catches} is missing: write it",
                    "ex06_parameter_sync.broadcast_parameters: the stub's",
                    "test_broadcast_parameters_updates_tensors_in_place is named by no wrong implementation: add a "):
        assert problem in done.stdout, done.stdout
    assert done.stdout.strip().endswith("dev check: 6 problems")


def test_dev_check_refuses_a_stub_that_spells_out_its_reference(tmp_path, capsys):
    """A stub poses the problem: at most a third of its reference's lines of code may occur in its text (its TODOs,
    docstrings and examples included). A stub whose TODO lists the reference's steps is refused, with the fix."""
    kit = kit_copy(tmp_path / "kit")
    fine = dev_check(capsys, kit, "--no-grade")
    assert fine.returncode == 0 and lines_under(fine.stdout, "stub size") == [], fine.stdout
    assert any(line.startswith("ok") and line.split()[1:3] == ["stub", "size:"] for line in fine.stdout.splitlines())
    reference = (kit / "solutions" / "ex16_mixed_precision.py").read_text().splitlines()
    start = next(index for index, line in enumerate(reference) if "def scaled_step" in line)
    steps = [line.strip() for line in reference[start:]
             if line.startswith("    ") and not line.strip().startswith('"""')]
    stub = kit / "exercises" / "ex16_mixed_precision.py"
    stub.write_text(stub.read_text().replace("    raise NotImplementedError\n", "    # TODO: " + "\n    #  ".join(steps)
                                             + "\n    raise NotImplementedError\n"))
    done = dev_check(capsys, kit, "--no-grade")
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert lines_under(done.stdout, "stub size") == [
        "exercises/ex16_mixed_precision.py holds 7 of the 9 lines of code of solutions/ex16_mixed_precision.py (at "
        "most 3): `with torch.autocast(inputs.device.type, dtype=dtype):`; `loss = loss_fn(model(inputs), targets)`; "
        "`scaler.scale(loss).backward()`; `scaler.step(optimizer)` ...: take them out of its TODOs, docstrings and "
        "examples (pose the problem: the idea, the API, an example of use), and move the steps into the exercise's "
        "hints in grader/catalog.toml, one at a time"], done.stdout
    assert done.stdout.strip().endswith("dev check: 1 problem")


def test_dev_check_names_a_check_file_that_does_not_parse(tmp_path, capsys):
    """A check file that does not parse is named by its path in the kit and its line, once (the other sections
    that read it leave it to this one)."""
    kit = kit_copy(tmp_path / "kit")
    checks = kit / "tests" / "test_ex04_sharding.py"
    checks.write_text(checks.read_text() + "\n\ndef test_broken(:\n    pass\n")
    done = dev_check(capsys, kit, "--no-grade")
    assert done.returncode == 1, done.stdout + done.stderr
    line = len(checks.read_text().splitlines()) - 1
    assert lines_under(done.stdout, "wrong implementations") == [
        f"tests/test_ex04_sharding.py:{line}: syntax error: fix it"], done.stdout
    assert done.stdout.strip().endswith("dev check: 1 problem"), done.stdout


def test_the_stub_measure_reads_lines_of_code_and_whole_names(tmp_path):
    """The reference's lines of code (no docstring, comment, or bracket alone; a trailing comment cut off) that the
    stub's text holds, comments included, a name inside a longer name not counted."""
    from grader.dev import body_lines, given_away

    reference, stub = tmp_path / "reference.py", tmp_path / "stub.py"
    reference.write_text('def f(model, x):\n    """Docstring: enable() here is not code."""\n    # a comment\n'
                         "    enable = model.enable  # a trailing comment\n    enable()\n"
                         "    y = g(\n        x,\n    )\n    return x\n")
    assert body_lines(reference) == ["enable = model.enable", "enable()", "y = g(", "x,", "return x"]
    stub.write_text('def f(model, x):\n    """Call model.gradient_checkpointing_enable() and return x_hat."""\n'
                    "    # TODO: enable = model.enable\n    raise NotImplementedError\n")
    assert given_away(stub, reference) == ["enable = model.enable"]


@pytest.mark.slow
def test_dev_check_grades_references_and_stubs(tmp_path):
    """A stub that passes is a fault: the shipped stubs must all be 'not started'."""
    kit = kit_copy(tmp_path / "kit", whole=True)
    (kit / "exercises" / "ex04_sharding.py").write_text(reference_source("ex04_sharding"))
    done = grader("dev", "check", "ex04", "--seed", SEED, cwd=kit, timeout=900)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("ok") and "references pass every check" in line for line in lines), done.stdout
    assert any(line.startswith("FAIL") and line.split()[1] == "stubs:" for line in lines), done.stdout
    assert "exercises/ex04_sharding.py test_" in done.stdout and ": passed" in done.stdout


@pytest.mark.slow
def test_dev_check_grades_a_reference_that_logs_through_a_handler_made_at_import(tmp_path):
    """ex11's Trainer logs through the handler transformers made when imported; dev check grades with its
    output redirected, where a fork server forked from the grader would hold only closed descriptors for
    it (the reference failed with "Bad file descriptor" so): then the servers are spawned afresh."""
    kit = kit_copy(tmp_path / "kit", whole=True)
    done = grader("dev", "check", "ex11", "--seed", SEED, cwd=kit, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "references pass every check" in done.stdout and "Bad file descriptor" not in done.stdout


@pytest.mark.parametrize("args", [[], ["chek"], ["check", "ex99"], ["check", "--bogus"], ["new"],
                                  ["new", "ex20_topk"], ["new", "ex20_topk", "--chapter", "two"],
                                  ["update", "--bogus"]])
def test_dev_usage_errors_are_one_line(args, capsys):
    assert "Traceback" not in refused(capsys, KIT_ROOT, *args)


def test_a_dev_usage_error_from_the_command_line_is_one_line():
    """The real command line: exit status 2, one line, no traceback."""
    done = grader("dev", "check", "ex99", timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


NEW = "ex29_topk_compression"


def test_dev_new_writes_four_files_and_an_entry_and_dev_check_names_what_is_left(tmp_path, capsys):
    """dev new, then dev check --no-grade names exactly the work left, each with its fix; hint says there are
    none; dev update rewrites the README once (a second run changes nothing) and --rebalance the points."""
    kit = kit_copy(tmp_path / "kit")
    catalog_before = (kit / "grader" / "catalog.toml").read_text()
    done = dev(capsys, kit, "new", NEW, "--chapter", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    paths = layout.files(NEW)
    for path in paths.all():
        assert (kit / path).is_file(), path
        assert path in done.stdout
        compile((kit / path).read_text(), path, "exec")
    assert "raise NotImplementedError" in (kit / paths.stub).read_text()
    assert "WRONG = [" in (kit / paths.catches).read_text() and "RIGHT = [" in (kit / paths.catches).read_text()
    catalog = tomllib.loads((kit / "grader" / "catalog.toml").read_text())
    entries = catalog["exercise"]
    ids = [entry["id"] for entry in entries]
    entry = entries[ids.index(NEW)]
    assert ids[ids.index(NEW) - 1] == "ex21_resume_training"  # chapter 2's last, before chapter 3's first
    assert entry == dict(id=NEW, chapter=2, title="Topk compression", points=15, preload="torch", hints=[])
    assert set(entry) >= {key for e in entries if e["id"] != NEW for key in e}  # every field the others have
    assert (kit / "grader" / "catalog.toml").read_text().startswith(catalog_before.split("[[exercise]]")[0])

    check = dev_check(capsys, kit, "--no-grade")
    assert check.returncode == 1, check.stdout + check.stderr
    assert "Traceback" not in check.stdout + check.stderr
    failed = [line.split()[1].rstrip(":") for line in check.stdout.splitlines() if line.startswith("FAIL")]
    assert failed == ["points", "hints", "README"], check.stdout
    assert lines_under(check.stdout, "points") == [
        "chapter 2 (distributed training): its exercises' points add up to 115, not 100: edit their points in "
        "grader/catalog.toml (in proportion: ex05 20 -> 15, ex12 20 -> 15, ex21 20 -> 15), or run "
        "python -m grader dev update --rebalance to write those"]
    assert lines_under(check.stdout, "hints") == [
        f"{NEW}: no hints: write at least one in its hints = [...] in grader/catalog.toml"]
    table, course_map = holding(kit, blocks.TABLE), holding(kit, blocks.MAP)
    assert lines_under(check.stdout, "README") == [
        f"{table}'s exercise table lacks {NEW}: run python -m grader dev update"]
    assert len(lines_under(check.stdout, "skeletons")) == 4  # a warning: the four files to write
    assert check.stdout.strip().endswith("dev check: 3 problems")

    from grader.learner.commands import hint as hint_command

    hint = dev(capsys, kit, NEW, command=hint_command)
    assert hint.returncode == 0 and hint.stdout.strip() == f"{NEW} has no hints yet: its checks' messages say what " \
                                                           f"went wrong", hint.stdout + hint.stderr
    assert dev(capsys, kit, NEW, "--all", command=hint_command).stdout == hint.stdout

    update = dev(capsys, kit, "update")
    assert update.returncode == 1, update.stdout + update.stderr  # chapter 2 still adds up to 115
    rewritten = ([f"{table}: the course map and the exercise table rewritten"] if table == course_map else
                 [f"{course_map}: the course map rewritten", f"{table}: the exercise table rewritten"])
    assert all(line in update.stdout for line in rewritten), update.stdout
    assert "dev update --rebalance" in update.stdout
    assert f"| {NEW} | 15 | `topk_compression(x)` |" in (kit / table).read_text()
    readme = (kit / course_map).read_text()
    assert "ex12 an Accelerator training loop, ex21 resume a training run, ex29 topk compression |" in readme
    texts = {path: (kit / path).read_text() for path in blocks.places(str(kit))}
    again = dev(capsys, kit, "update")
    assert f"{table}: up to date" in again.stdout and f"{course_map}: up to date" in again.stdout, again.stdout
    assert {path: (kit / path).read_text() for path in texts} == texts

    rebalance = dev(capsys, kit, "update", "--rebalance")
    assert rebalance.returncode == 0, rebalance.stdout + rebalance.stderr
    points = {e["id"][:4]: e["points"] for e in tomllib.loads((kit / "grader" / "catalog.toml").read_text())["exercise"]
              if e["chapter"] == 2}
    assert points == dict(ex05=15, ex06=10, ex07=15, ex11=15, ex12=15, ex21=15, ex29=15)
    texts = {path: (kit / path).read_text() for path in blocks.places(str(kit))}
    assert dev(capsys, kit, "update").returncode == 0
    assert {path: (kit / path).read_text() for path in texts} == texts
    left = dev_check(capsys, kit, "--no-grade")
    failed = [line.split()[1].rstrip(":") for line in left.stdout.splitlines() if line.startswith("FAIL")]
    assert failed == ["hints"] and left.stdout.strip().endswith("dev check: 1 problem"), left.stdout


def test_dev_new_refuses_in_one_line_and_writes_nothing(tmp_path, capsys):
    kit = kit_copy(tmp_path / "kit")
    (kit / "solutions" / "ex28_already_here.py").write_text("")
    before = {path: path.read_bytes() for path in kit.rglob("*") if path.is_file()}
    for args, says in ((["ex2_short", "--chapter", "1"], "not an id of the form exNN_lowercase_words"),
                       (["ex20_Capital", "--chapter", "1"], "not an id of the form"),
                       (["ex04_sharding", "--chapter", "1"], "the id is taken by ex04_sharding"),
                       (["ex04_other", "--chapter", "1"], "number 04 is taken by ex04_sharding"),
                       (["ex27_fine", "--chapter", "9"], "unknown chapter 9 (known: 1, 2, 3, 4, 5)"),
                       (["ex28_already_here", "--chapter", "1"], "solutions/ex28_already_here.py already exists")):
        error = refused(capsys, kit, "new", *args)
        assert says in error, (args, error)
    assert {path: path.read_bytes() for path in kit.rglob("*") if path.is_file()} == before


def test_dev_check_asks_for_dev_update_when_the_readme_is_out_of_date(tmp_path, capsys):
    kit = kit_copy(tmp_path / "kit")
    course_map, table = holding(kit, blocks.MAP), holding(kit, blocks.TABLE)
    readme = (kit / course_map).read_text()
    (kit / course_map).write_text(readme.replace("| 2 distributed training |", "| 2 distributed learning |"))
    check = dev_check(capsys, kit, "--no-grade")
    its = "course map or exercise table" if course_map == table else "course map"
    assert lines_under(check.stdout, "README") == [
        f"{course_map}: its {its} is out of date with grader/catalog.toml: "
        "run python -m grader dev update"], check.stdout
    assert dev(capsys, kit, "update").returncode == 0 and (kit / course_map).read_text() == readme
    text = (kit / table).read_text()
    (kit / table).write_text(text.replace(TABLE_END + "\n", ""))
    for done in (dev_check(capsys, kit, "--no-grade"), dev(capsys, kit, "update")):
        assert done.returncode == 1 and "the markers" in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_cli_reference_is_made_from_every_parser():
    """Every command's section, each with every option of its parser (its option strings, choices and help), the
    pytest plugin's options too; the same text every time, and argparse left as it was."""
    from grader import cli
    from grader.dev import cli_reference

    original = argparse.ArgumentParser.parse_known_args
    text = cli_reference.markdown()
    assert argparse.ArgumentParser.parse_known_args is original
    assert cli_reference.markdown() == text
    assert "## `python -m grader`\n" in text and "## `pytest`: the grader's plugin's options" in text
    for name in cli.command_names():
        assert f"## `python -m grader {name}`\n" in text, name
    for name in ("check", "new", "update"):
        assert f"## `python -m grader dev {name}`\n" in text, name
    parsers = [cli.build_parser(), *(cli_reference.command_parser(name) for name in cli.command_names()),
               cli_reference.pytest_parser()]
    for parser in parsers:
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings:
                assert f"`{option}" in text or f", {option}" in text, (parser.prog, option)
            if action.choices and not isinstance(action, argparse._SubParsersAction):
                assert "{" + ",".join(map(str, action.choices)) + "}" in text, (parser.prog, action.dest)
    assert "| `--device {cpu,cuda,mps,all}` | `all` | devices to check on" in text  # the plugin's
    assert "| `--chapter CHAPTER` | required |" in text  # dev new's
    assert "| `--timeout SECONDS` | `60` | the longest one check may run" in text


def test_every_command_exposes_its_parser_and_dev_imports_no_command():
    """grader.commands names each command's module; each gives the parser its main parses with, without running
    anything; grader.dev reaches `python -m grader`'s own parser through grader.commands, never by an import."""
    from grader import cli, commands

    assert cli.command_names() == tuple(commands.COMMANDS)
    assert commands.parser_of(None).prog == "python -m grader"
    for name in commands.COMMANDS:
        assert commands.parser_of(name).prog == f"python -m grader {name}", name
    folder = os.path.join(KIT_ROOT, "grader", "dev")
    for file in sorted(os.listdir(folder)):
        if file.endswith(".py"):
            with open(os.path.join(folder, file)) as handle:
                tree = ast.parse(handle.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    imported = [f"{node.module}.{alias.name}" for alias in node.names]
                elif isinstance(node, ast.Import):
                    imported = [alias.name for alias in node.names]
                else:
                    continue
                assert not any(name == "grader.cli" or name.startswith("grader.cli.") for name in imported), file


def test_dev_check_names_a_stale_cli_reference_and_dev_update_rewrites_it(tmp_path, capsys, monkeypatch):
    """A parser's help changed (merge's, in this process): dev check names the CLI reference, dev update rewrites it
    from the parsers, and then dev check is content."""
    from grader.batch import merge

    kit = kit_copy(tmp_path / "kit")
    where = holding(kit, blocks.CLI)
    build_parser = merge.build_parser

    def changed():
        parser = build_parser()
        csv = next(action for action in parser._actions if "--csv" in action.option_strings)
        assert csv.help == "write the class's CSV summary"
        csv.help += ", a row a student"
        return parser

    monkeypatch.setattr(merge, "build_parser", changed)
    check = dev_check(capsys, kit, "--no-grade")
    assert check.returncode == 1, check.stdout + check.stderr
    assert lines_under(check.stdout, "CLI reference") == [
        f"{where}: its CLI reference is out of date with the parsers: run python -m grader dev update"], check.stdout
    assert check.stdout.strip().endswith("dev check: 1 problem")
    update = dev(capsys, kit, "update")
    assert update.returncode == 0, update.stdout + update.stderr
    assert f"{where}: the CLI reference rewritten from the parsers" in update.stdout
    assert "| `--csv PATH` |  | write the class's CSV summary, a row a student |" in (kit / where).read_text()
    again = dev_check(capsys, kit, "--no-grade")
    assert again.returncode == 0 and "dev check: all good" in again.stdout, again.stdout


def test_each_block_is_found_by_its_markers_in_any_docs_file(tmp_path, capsys):
    """A block moved into another docs/*.md file is found there, checked and rewritten there; a block whose
    markers are in no file is a problem that names them."""
    kit = kit_copy(tmp_path / "kit")
    course_map = holding(kit, blocks.MAP)
    text = (kit / course_map).read_text()
    begin, end = blocks.MAP.markers
    block = text[text.index(begin):text.index(end) + len(end)]
    (kit / course_map).write_text(text.replace(block + "\n", ""))
    (kit / "docs" / "x.md").write_text("# The course\n\n" + block.replace("| 2 distributed training |",
                                                                          "| 2 distributed learning |") + "\n")
    check = dev_check(capsys, kit, "--no-grade")
    assert lines_under(check.stdout, "README") == [
        "docs/x.md: its course map is out of date with grader/catalog.toml: run python -m grader dev update"], \
        check.stdout
    update = dev(capsys, kit, "update")
    assert update.returncode == 0 and "docs/x.md: the course map rewritten from grader/catalog.toml" in update.stdout
    assert (kit / "docs" / "x.md").read_text() == "# The course\n\n" + block + "\n"
    assert dev_check(capsys, kit, "--no-grade").returncode == 0

    (kit / "docs" / "x.md").write_text("# The course\n")
    missing = f"the markers {begin} and {end} are in none of README.md, docs/*.md: put them back around the " \
              f"course map"
    check = dev_check(capsys, kit, "--no-grade")
    assert check.returncode == 1 and any(line.startswith(missing) for line in lines_under(check.stdout, "README")), \
        check.stdout
    update = dev(capsys, kit, "update")
    assert update.returncode == 1 and missing in update.stderr, update.stdout + update.stderr


def test_the_block_finder_reads_readme_and_docs(tmp_path):
    """In process: the files a block may be in (README.md, then docs/*.md by name), each block made where its
    markers are, the rest of the file kept; doubled and missing markers named."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# Kit\n")
    begin, end = blocks.CLI.markers
    (tmp_path / "docs" / "b.md").write_text(f"head\n{begin}\nold\n{end}\ntail\n")
    (tmp_path / "docs" / "a.md").write_text("nothing here\n")
    assert blocks.places(str(tmp_path)) == ["README.md", "docs/a.md", "docs/b.md"]
    derived, problems = blocks.derive({blocks.CLI: lambda old: "\n\nnew\n\n"}, str(tmp_path))
    assert problems == [] and [file.path for file in derived] == ["docs/b.md"]
    assert derived[0].wanted == f"head\n{begin}\n\nnew\n\n{end}\ntail\n" and derived[0].stale
    derived, problems = blocks.derive({blocks.TABLE: lambda old: old}, str(tmp_path))
    assert derived == [] and problems == [
        f"the markers {blocks.TABLE.markers[0]} and {blocks.TABLE.markers[1]} are in none of README.md, docs/*.md: "
        f"put them back around the exercise table (git log -p shows where they were)"]
    (tmp_path / "docs" / "a.md").write_text(f"{begin}\n{end}\n")
    assert blocks.derive({blocks.CLI: lambda old: old}, str(tmp_path))[1] == [
        f"the markers {begin} and {end} are in docs/a.md and docs/b.md: keep the CLI reference in one of them "
        f"(delete the other's markers and what lies between)"]


def test_the_grader_imports_nothing_from_the_tests():
    """Product code never depends on test code: no module of grader/ imports `tests` (the catches files are
    loaded as data, by path)."""
    found = []
    for folder, _, names in os.walk(os.path.join(KIT_ROOT, "grader")):
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path) as handle:
                tree = ast.parse(handle.read(), path)
            for node in ast.walk(tree):
                modules = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                           [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                found += [f"{os.path.relpath(path, KIT_ROOT)}:{node.lineno}: {module}" for module in modules
                          if module == "tests" or module.startswith("tests.")]
    assert found == []


def test_every_checks_docstring_comes_first_where_the_reports_read_it():
    """A docstring after `assume_dtype_on(...)` is a plain string statement: reports would show the check's name. Over
    every check file, and on a check written so."""
    from grader.dev import late_docstrings
    from grader.dev.check import check_docstrings
    from grader.dev.kit import Work

    assert check_docstrings(Work.read(Kit(KIT_ROOT)))[0] == []
    late = 'def test_x(grade, case):\n    assume_dtype_on(grade.device, "float64")\n    """The sentence."""\n'
    assert [line.split(": ")[0] for line in late_docstrings(late, "t.py")] == ["t.py:3"]
    first = 'def test_x(grade, case):\n    """The sentence."""\n    assume_dtype_on(grade.device, "float64")\n'
    assert late_docstrings(first, "t.py") == []


def test_the_layout_is_the_one_place_that_spells_the_kits_folders():
    """grader/layout.py knows where the stubs, references and checks live: no other module of the grader joins a
    root with their names (runner.py and session.py once did), so a kit laid out otherwise changes one module."""
    import re

    spelled = re.compile(r"join\(\w*(?:ROOT|root|out)\w*, *[\"'](?:tests|solutions|exercises)[\"']")
    found = []
    for folder, _, names in os.walk(os.path.join(KIT_ROOT, "grader")):
        for name in names:
            path = os.path.join(folder, name)
            if name.endswith(".py") and path != layout.__file__:
                with open(path) as handle:
                    found += [f"{path}:{number}" for number, line in enumerate(handle, 1) if spelled.search(line)]
    assert found == []
