"""One quiet flag, bars only on a terminal, the batch's overall bar (issue 19, item 11), and the
help every argument deserves (item 15)."""

from __future__ import annotations

import argparse
import io

import pytest

from charactereval_lib.cli import build_parser, main
from charactereval_lib.engine import progress
from charactereval_lib.engine.registry import batching
from charactereval_lib.engine.registry.batching import ModelResult
from charactereval_lib.pipeline.charactereval_batch import BAR_STEPS

WITH_BARS = (["generate", "R", "--backend", "offline", "--model", "m"], ["score", "R"], ["battle", "A", "B", "--out", "O", "--judge-model", "j"],
             ["metaeval", "L", "--out", "O", "--scorer", "judge"], ["batch", "C"], ["data", "fetch"],
             ["coser", "run", "R"], ["coser", "import", "F", "R"], ["coser", "data", "fetch"])


@pytest.mark.parametrize("argv", WITH_BARS, ids=lambda argv: " ".join(argv[:2]))
def test_every_command_with_bars_takes_quiet(argv):
    assert build_parser().parse_args([*argv, "--quiet"]).quiet is True
    assert build_parser().parse_args(argv).quiet is False


@pytest.mark.parametrize("argv", [["generate", "R", "--backend", "offline", "--model", "m"], ["coser", "run", "R"]])
def test_the_old_no_progress_still_works_and_says_it_is_deprecated(argv, capsys):
    assert build_parser().parse_args([*argv, "--no-progress"]).quiet is True
    assert capsys.readouterr().err == f"warning: {progress.DEPRECATED_NO_PROGRESS}\n"
    assert "--no-progress" not in build_parser().parse_args(argv).__dict__


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bars_only_on_a_terminal_and_never_when_quiet():
    assert progress.bars_wanted(False, Terminal()) is True
    assert progress.bars_wanted(True, Terminal()) is False
    assert progress.bars_wanted(False, io.StringIO()) is False


def test_the_batch_bar_counts_models_times_steps(capsys):
    result = ModelResult("m1", "outputs/m1")
    with progress.overall(2, BAR_STEPS, enabled=True) as bar:
        assert progress.current() is bar and bar.bar.total == 2 * len(BAR_STEPS)
        for step in ("data", "generate", "transform"):
            batching.step(result, step)
        assert bar.bar.n == 2  # data and generate are done, transform is running
        assert bar.bar.desc.startswith("batch: m1: transform")
        bar.model_done()  # m1 failed at transform: its whole share is ticked off
        assert bar.bar.n == len(BAR_STEPS)
        batching.step(ModelResult("m2", "outputs/m2"), "data")
        bar.model_done()
        assert bar.bar.n == bar.bar.total
    assert progress.current() is None
    assert "== m1: transform" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["score", "summarize", "report", "transform", "panel"])
def test_run_is_documented(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert " ".join(capsys.readouterr().out.split()).count("RUN run directory (a bare name means outputs/NAME)") == 1


def test_metaeval_scorer_and_dtype_have_help(capsys):
    with pytest.raises(SystemExit):
        main(["metaeval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--scorer {judge,reward-model} whose predictions meet the labels" in text
    assert "--mode {faithful,fast} faithful (default)" in text
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    assert "weights' dtype" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["score", "R", "--bogus"], ["coser", "summarize", "R", "--nope"]])
def test_argument_errors_point_to_the_subcommand_help(argv, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    prog = "charactereval " + " ".join(a for a in argv[:2] if a != "R")
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {prog}: unrecognized arguments: {argv[-1]}") and f"(see {prog} --help)" in err


def _commands(parser, path=("charactereval",)):
    """Every (command path, parser, help line) below ``parser``, walking its subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), sub, helps.get(name)
                yield from _commands(sub, (*path, name))


def test_every_command_and_argument_of_the_whole_tree_has_help():
    """Walks the parser itself (every benchmark's command loaded): each command and subcommand
    has a help line in its parent's list, and each of its arguments, positional or option, has
    a help text; and each --help renders."""
    root = build_parser()
    commands = [(("charactereval",), root, root.description), *_commands(root)]
    names = {" ".join(path[1:]) for path, _, _ in commands}
    assert {"coser data fetch", "coser data verify", "coser data use", "rm check", "battle", "coser run"} <= names
    missing = [" ".join(path) for path, _, text in commands if not (text or "").strip()]
    for path, parser, _ in commands:
        missing += [f"{' '.join(path)} {'/'.join(a.option_strings) or a.metavar or a.dest}" for a in parser._actions
                    if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
                    and a.help != argparse.SUPPRESS and not (a.help or "").strip()]
        assert parser.format_help()
    assert missing == []
