"""The CLI reference: every command of `python -m grader` and the options of the grader's pytest plugin, in
Markdown, made from the argparse parsers themselves (each argument's option strings, choices, default and
help), so it cannot drift from them. `dev update` writes it between its markers (grader.dev.blocks.CLI);
`dev check` says when it is out of date.

Each command's module exposes the parser its `main` parses with (`build_parser`); grader.commands names the
module of each command and of `python -m grader` itself, and imports it by name: this module imports none of
them (no import circle through the command line's dispatch), and no command runs."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from typing import Any, cast

from grader import commands

HEADING = "##"  # each command a section of the page that holds the block


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser `python -m grader NAME` parses with (grader.commands: its module's build_parser)."""
    return commands.parser_of(name)


class _PytestOptions:
    """What `pytest_addoption` is given, as far as the plugin uses it: its options go to an argparse parser."""

    def __init__(self) -> None:
        about = ("The grader's pytest plugin (grader/grading/pytest_plugin.py) adds these options to pytest's own: "
                 "`pytest tests/test_ex04_sharding.py --device cpu`.")
        self.parser = argparse.ArgumentParser(prog="pytest", add_help=False, description=about)

    def getgroup(self, name: str, description: str = "") -> _PytestOptions:
        return self

    def addoption(self, *names: str, **attributes: Any) -> None:
        self.parser.add_argument(*names, **attributes)

    def addini(self, *args: Any, **kwargs: Any) -> None:
        pass


def pytest_parser() -> argparse.ArgumentParser:
    from grader.grading import pytest_plugin

    options = _PytestOptions()
    pytest_plugin.pytest_addoption(cast(Any, options))
    return options.parser


# --- Markdown -------------------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _text(text: str) -> str:
    """One line of prose: outside code no `*` or `<` that Markdown would read as emphasis or HTML."""
    parts = _one_line(text).split("`")
    return "`".join(part if index % 2 else part.replace("*", "\\*").replace("<", "&lt;")
                    for index, part in enumerate(parts))


def _cell(text: str) -> str:
    """Prose for a table's cell: its pipes escaped too (even in code, as tables need)."""
    return _text(text).replace("|", "\\|")


def _code(text: str) -> str:
    return _one_line(text).replace("|", "\\|")


def _value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return " ".join(_value(item) for item in value)
    return str(value)


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return "{" + ",".join(str(choice) for choice in action.choices) + "}"
    return action.dest if not action.option_strings else action.dest.upper()


def _arguments(action: argparse.Action) -> str:
    """The argument an action takes, as argparse's usage writes it: `N`, `[PATH]`, `EXERCISE ...`."""
    name, nargs = _metavar(action), action.nargs
    if nargs == 0:
        return ""
    if nargs is None:
        return name
    if nargs == argparse.OPTIONAL:
        return f"[{name}]"
    if nargs == argparse.ZERO_OR_MORE:
        return f"[{name} ...]"
    if nargs == argparse.ONE_OR_MORE:
        return f"{name} [{name} ...]"
    if isinstance(nargs, int):
        return " ".join([name] * nargs)
    return name


def _shown(action: argparse.Action) -> bool:
    return action.help != argparse.SUPPRESS and not isinstance(action, (argparse._HelpAction,
                                                                        argparse._VersionAction))


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%" in text:
        params: dict[str, object] = {**vars(action), "prog": prog}
        if action.choices is not None:
            params["choices"] = ", ".join(str(choice) for choice in action.choices)
        try:
            text = text % params
        except (KeyError, TypeError, ValueError):
            pass
    if isinstance(action, argparse._AppendAction) and "repeatable" not in text:
        text = f"{text}; repeatable" if text else "repeatable"
    return _cell(text)


def _default(action: argparse.Action) -> str:
    if action.required and action.option_strings:
        return "required"
    if (action.default in (None, False, argparse.SUPPRESS, []) or action.nargs == 0
            or isinstance(action, argparse._SubParsersAction)):
        return ""
    return f"`{_code(_value(action.default))}`"


def _row(action: argparse.Action, prog: str) -> str:
    taken = _arguments(action)
    if action.option_strings:
        names = ", ".join(f"{option} {taken}".strip() for option in action.option_strings)
    else:
        names = taken
    return f"| `{_code(names)}` | {_default(action)} | {_help(action, prog)} |"


def _synopsis(parser: argparse.ArgumentParser) -> str:
    actions = [action for action in parser._actions if _shown(action)]
    words = [parser.prog] + (["[OPTIONS]"] if any(action.option_strings for action in actions) else [])
    words += [_arguments(action) for action in actions if not action.option_strings]
    return " ".join(word for word in words if word)


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand of the parser's subparsers, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            seen: set[int] = set()
            for name, subparser in action.choices.items():
                if id(subparser) not in seen:
                    seen.add(id(subparser))
                    yield name, helps.get(name, ""), subparser


def section(parser: argparse.ArgumentParser, title: str | None = None) -> list[str]:
    """The lines of one command's section: its heading, description, synopsis and a table of its arguments; then
    a section for each of its subcommands."""
    lines = [f"{HEADING} {title or f'`{parser.prog}`'}", ""]
    if parser.description:
        lines += [_text(parser.description), ""]
    lines += [f"`{_code(_synopsis(parser))}`", ""]
    rows = [_row(action, parser.prog) for action in parser._actions
            if _shown(action) and not isinstance(action, argparse._SubParsersAction)]
    subcommands = list(_subcommands(parser))
    if subcommands:
        lines += ["| command | what it does |", "|---|---|"]
        lines += [f"| `{name}` | {_cell(text)} |" for name, text, _ in subcommands]
        lines.append("")
    if rows:
        lines += ["| argument | default | what it does |", "|---|---|---|", *rows, ""]
    for _, _, subparser in subcommands:
        lines += section(subparser)
    return lines


def markdown() -> str:
    """The whole reference: `python -m grader`, each of its commands (grader.commands.COMMANDS, in that order),
    and the pytest plugin's options. The same parsers give the same text, on any machine."""
    names = commands.names()
    parsers = {name: command_parser(name) for name in names}
    lines = ["Every command takes `-h` / `--help`, which says the same in the terminal. This reference is made "
             "from the commands' parsers by `python -m grader dev update`: edit a parser's help, not this text.", ""]
    top = section(commands.parser_of(None))
    lines += top[:-1] if top[-1] == "" else top
    lines += ["", "| command | what it does |", "|---|---|"]
    lines += [f"| `{name}` | {_cell((parsers[name].description or '').split('. ')[0].rstrip('.'))} |"
              for name in names]
    lines.append("")
    for name in names:
        lines += section(parsers[name])
    lines += section(pytest_parser(), "`pytest`: the grader's plugin's options")
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines)
