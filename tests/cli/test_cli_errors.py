"""No user input produces a traceback: every command given bad input says what and where in one
line on stderr and exits with a documented status (1 = a check failed, 2 = bad input or usage),
leaving nothing half-written behind."""

from __future__ import annotations

import pytest

from charactereval_lib.cli import main


def bad_inputs(data: str, tmp: str) -> list[tuple[list[str], int, str]]:
    flags = ["--data-dir", data]
    return [
        (["generate", f"{tmp}/g", "--backend", "offline", "--model", "m", "--limit", "-5", *flags], 2,
         "limit must be a positive number, got -5"),
        (["generate", f"{tmp}/g", "--backend", "offline", "--model", "m", "--limit", "0", *flags], 2,
         "limit must be a positive number, got 0"),
        (["generate", f"{tmp}/g", "--backend", "nope", "--model", "m"], 2, "invalid choice: 'nope'"),
        (["generate", f"{tmp}/g", "--backend", "offline", "--model", "m", "--preset", "x"], 2, "invalid choice: 'x'"),
        (["generate", f"{tmp}/g", "--backend", "offline", "--model", "m", "--max-tokens", "0", *flags], 2,
         "max_tokens must be a positive number"),
        (["transform", f"{tmp}/missing", *flags], 2, "no generations to transform"),
        (["score", f"{tmp}/missing", "--rm", tmp, *flags], 2, "rows.jsonl"),
        (["score", f"{tmp}/r", "--batch", "100"], 2, "unrecognized arguments: --batch 100"),
        (["score", f"{tmp}/r", "--mode", "quick"], 2, "invalid choice: 'quick'"),
        (["score", f"{tmp}/r", "--shard", "3/2"], 2, "shard"),
        (["summarize", f"{tmp}/missing"], 2, "no such run directory"),
        (["summarize", f"{tmp}/r", "--n-boot", "0"], 2, "n_boot must be a positive number, got 0"),
        (["report", f"{tmp}/r", "--baseline", "UNKNOWN"], 2, "unknown baseline model(s) ['UNKNOWN']"),
        (["compare", f"{tmp}/r", "--out", f"{tmp}/cmp"], 2, "compare needs at least two runs"),
        (["export-official", f"{tmp}/missing", *flags], 2, "no generations to export"),
        (["import-official", f"{tmp}/none.json", f"{tmp}/imp", *flags], 2, "none.json"),
        (["batch", f"{tmp}/none.yaml"], 2, "batch config missing"),
        (["leaderboard", f"{tmp}/missing", "--out", f"{tmp}/lb"], 2, "no such run or folder"),
        (["leaderboard", f"{tmp}/r", "--out", f"{tmp}/lb"], 2, "no run.json in it or below it"),
        (["data", "verify", "--dir", f"{tmp}/nodata"], 1, "nodata: no such data directory"),
        (["doctor", "--data-dir", f"{tmp}/nodata"], 1, "missing"),
        (["rm", "check", f"{tmp}/norm"], 1, "missing"),
        (["coser", "data", "verify", "--dir", f"{tmp}/nodata"], 1, "nodata: no such CoSER data directory"),
        (["nosuchcommand"], 2, "invalid choice: 'nosuchcommand'"),
    ]


def test_every_command_fails_in_one_line_with_a_documented_status(official_dir, tmp_path, capsys):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "rows.jsonl").write_text("")
    before = sorted(p.name for p in tmp_path.iterdir())
    for argv, code, message in bad_inputs(str(official_dir), str(tmp_path)):
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code
        out, err = capsys.readouterr()
        lines = [line for line in err.splitlines() if line.strip()]
        assert status == code, (argv, status, err)
        assert "Traceback" not in err + out, argv
        assert lines and all(line.startswith("error: ") for line in lines), (argv, err)
        assert message in err, (argv, err)
        if code == 2:
            assert len(lines) == 1, (argv, err)
    # Bad input leaves no run, report or export directory behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("argv", [["--version"], ["generate", "--help"]])
def test_help_and_version_exit_zero(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0 and capsys.readouterr().out


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(official_dir):
    import subprocess
    import sys

    # `charactereval data subset 4000 | head -0`: the reader is gone before the command writes
    # (it is still importing), so its first write meets a closed pipe.
    command = [sys.executable, "-m", "charactereval_lib.cli", "data", "subset", "4000", "--dir", str(official_dir)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        process.stdout.close()
        stderr = process.stderr.read().decode()
        code = process.wait(timeout=60)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert code in (0, 141), (code, stderr)
