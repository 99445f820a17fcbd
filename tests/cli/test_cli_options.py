"""Options read their defaults from the pipeline's settings, and ``--seed`` got two names."""

from __future__ import annotations

import argparse

import pytest

from charactereval_lib import pipeline
from charactereval_lib.cli import build_parser

# command (words) -> the settings class its options fill.
SETTINGS = {
    ("generate",): pipeline.GenerateSettings,
    ("score",): pipeline.ScoreSettings,
    ("summarize",): pipeline.SummarizeSettings,
    ("report",): pipeline.ReportSettings,
    ("compare",): pipeline.ReportSettings,
    ("panel",): pipeline.PanelSettings,
    ("battle",): pipeline.JudgeSettings,
    ("coser", "run"): pipeline.CoserRunSettings,
    ("coser", "summarize"): pipeline.CoserSummarizeSettings,
    ("coser", "report"): pipeline.CoserReportSettings,
}


def subparser(words: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser(list(words))
    for word in words:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[word]
    return parser


@pytest.mark.parametrize("words", list(SETTINGS), ids=" ".join)
def test_every_option_left_out_means_the_settings_default(words):
    cls = SETTINGS[words]
    fields = set(cls.keys())
    checked = 0
    for action in subparser(words)._actions:
        if action.dest in fields and action.default is not argparse.SUPPRESS and not action.required:
            default = cls.default(action.dest)
            # Required fields have no default; baselines None on the command line means the
            # settings' default; coser's --protocol names the version its settings' None means.
            if action.dest in ("baselines", "protocol") or cls.model_fields[action.dest].is_required():
                continue
            assert action.default == default, (words, action.dest)
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize("argv, seed", [
    (["summarize", "r", "--bootstrap-seed", "5"], 5),
    (["report", "r", "--bootstrap-seed", "6"], 6),
    (["coser", "summarize", "r", "--bootstrap-seed", "7"], 7),
    (["generate", "r", "--backend", "offline", "--model", "m", "--decoding-seed", "8"], 8),
])
def test_the_two_seeds_have_their_own_names(argv, seed, capsys):
    assert build_parser(argv).parse_args(argv).seed == seed
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv, new", [
    (["summarize", "r", "--seed", "5"], "--bootstrap-seed"),
    (["battle", "a", "b", "--out", "o", "--judge-model", "j", "--seed", "5"], "--bootstrap-seed"),
    (["coser", "report", "r", "--seed", "5"], "--bootstrap-seed"),
    (["generate", "r", "--backend", "offline", "--model", "m", "--seed", "5"], "--decoding-seed"),
])
def test_the_old_seed_still_works_and_says_which_name_to_use(argv, new, capsys):
    assert build_parser(argv).parse_args(argv).seed == 5
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"warning: --seed is deprecated here; use {new}"]


def test_help_lists_the_new_names_only(capsys):
    with pytest.raises(SystemExit):
        build_parser(["summarize"]).parse_args(["summarize", "--help"])
    out = capsys.readouterr().out
    assert "--bootstrap-seed" in out and "--seed" not in out.replace("--bootstrap-seed", "")
