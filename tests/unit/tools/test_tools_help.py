"""``sundial --help`` and every tool's help are complete: each command, action and option is documented."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from sundial.cli import build_parser

TOOLS = ("topics", "get-offsets", "console-producer", "console-consumer", "dump-log", "consumer-groups", "failover",
         "mirror", "credentials", "acls", "log-dirs", "share-groups")
COMMANDS = ("serve",) + TOOLS


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _all_parsers():
    root = build_parser()
    out = []
    for name, sub in _subcommands(root).items():
        if name not in COMMANDS:
            continue
        nested = _subcommands(sub)
        if nested:
            out.extend((f"{name} {child}", p) for child, p in nested.items())
        out.append((name, sub))
    return out


def test_every_tool_is_registered():
    names = set(_subcommands(build_parser()))
    assert set(TOOLS) <= names


@pytest.mark.parametrize("name, parser", _all_parsers(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_option_has_help(name, parser):
    assert parser.description, f"{name} has no description"
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        assert action.help and action.help.strip(), f"{name}: {action.option_strings or action.dest} has no help"
    text = parser.format_help()
    assert "usage:" in text


def test_top_level_help_lists_the_tools():
    result = subprocess.run([sys.executable, "-m", "sundial", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for name in TOOLS:
        assert name in result.stdout
    sub = _subcommands(build_parser())
    for name in TOOLS:
        # each command's one-line help shows in the list
        assert sub[name].prog.endswith(name)


@pytest.mark.parametrize("argv", [[t, "--help"] for t in TOOLS] + [["topics", a, "--help"] for a in
                                                                   ("create", "list", "describe", "alter-config",
                                                                    "add-partitions", "delete")])
def test_help_exits_zero(argv, capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: sundial ")


def test_user_facing_help_speaks_of_what_commands_do():
    """No internal labels (design "seed" numbers) and no broken sentences in any help text."""
    texts = [build_parser().format_help()] + [p.format_help() for _name, p in _all_parsers()]
    for text in texts:
        assert "seed 0" not in text.lower(), text
        assert "to connect to (any" not in text, text   # "cluster A, read from to connect to ..."


def test_help_documents_exit_codes():
    assert "exit codes:" in build_parser().format_help()
    sub = _subcommands(build_parser())
    for name in ("serve", "dump-log", "credentials", "acls"):
        assert "exit codes:" in sub[name].format_help(), name
