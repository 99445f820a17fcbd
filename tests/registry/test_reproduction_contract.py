"""The reproduction contract (``engine.registry.benchmarks.Reproduction``): every registered benchmark that
declares one declares it completely, and a benchmark outside the library (``tests/toybench``,
registered by ``$CHARACTEREVAL_BENCHMARKS``) gets ``charactereval reproduce`` — its option on
the command line, its report with the standard sections — with no library change."""

from __future__ import annotations

import json

import pytest

from charactereval_lib.cli import main
from charactereval_lib.engine.registry import benchmarks
from tests.toybench.reproduce import PAPER, RELEASED, released_file


@pytest.fixture(autouse=True)
def toybench(monkeypatch):
    monkeypatch.setenv(benchmarks.ENV, "tests.toybench:BENCHMARK")


def test_every_declared_reproduction_is_complete():
    declared = benchmarks.reproducible()
    assert {"charactereval", "coser", "toybench"} <= set(declared)
    flags: dict[str, benchmarks.Option] = {}
    for name, benchmark in declared.items():
        reproduction = benchmark.reproduction
        assert reproduction.title, name
        for hook in (reproduction.prepare, reproduction.notes, reproduction.file_columns, reproduction.sections):
            assert hook is None or callable(benchmarks.resolve(hook, name)), (name, hook)
        for option in reproduction.options:
            assert isinstance(option, benchmarks.Option) and option.help, (name, option)
            # The command line has one flag per name: a reuse must mean the same kind of flag.
            assert option.name not in benchmarks.COMMON_KEYWORDS, (name, option.name)
            assert flags.setdefault(option.name, option).flag == option.flag, (name, option.name)
            assert reproduction.accepts(option.name)


def toy_data(tmp_path):
    """Eight questions and the two released answer files: toy-a right on 4 (the paper's 0.50),
    toy-b on 1 (the paper says 0.75), its recorded accuracy wrong."""
    data = tmp_path / "toydata"
    (data / RELEASED).mkdir(parents=True)
    questions = [{"id": i, "question": f"q{i}", "answer": f"a{i}"} for i in range(8)]
    (data / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    for model, right, recorded in (("toy-a", 4, 0.5), ("toy-b", 1, 0.75)):
        answers = [{"id": i, "reply": f"a{i}" if i < right else "?"} for i in range(8)]
        (data / RELEASED / released_file(model)).write_text(
            json.dumps({"model": model, "accuracy": recorded, "answers": answers}), encoding="utf-8")
    return data


def test_toybench_reproduces_through_the_command_line_with_its_own_option(tmp_path, capsys):
    data = toy_data(tmp_path)
    moved = tmp_path / "elsewhere"
    (data / RELEASED).rename(moved)
    out = tmp_path / "repro"
    assert main(["reproduce", "--benchmark", "toybench", "--out", str(out), "--data-dir", str(data),
                 "--released", str(moved), "--n-boot", "200", "--quiet"]) == 0
    assert "2 cells, 1/2 reproduce the paper" in capsys.readouterr().out
    document = json.loads((out / "reproduction.json").read_text(encoding="utf-8"))
    rows = {r["model"]: r for r in document["rows"]}
    assert set(rows) == set(PAPER) and rows["toy-a"]["recomputed"] == 0.5 and rows["toy-a"]["within"] is True
    assert rows["toy-b"]["recomputed"] == 0.125 and rows["toy-b"]["within"] is False
    assert rows["toy-b"]["delta"] == pytest.approx(-0.625)
    html = (out / "reproduction.html").read_text(encoding="utf-8")
    assert "Reproduction: ToyBench" in html and "question bootstrap" in html
    assert "What was recomputed" in html and "Against the paper" in html and "recorded accuracy" in html
    assert "answers_toy-b.json: the recorded accuracy is not the recomputed one" in html


def test_an_option_of_the_toy_is_refused_for_another_benchmark_and_its_bad_input_is_one_line(tmp_path, capsys):
    assert main(["reproduce", "--benchmark", "coser", "--out", str(tmp_path / "o"), "--released", "x"]) == 2
    assert capsys.readouterr().err == "error: --released is an option of the ToyBench reproduction, not of CoSER's\n"
    data = toy_data(tmp_path)
    assert main(["reproduce", "--benchmark", "toybench", "--out", str(tmp_path / "o"), "--data-dir", str(data),
                 "--released", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "answers_toy-a.json: cannot read the released answers" in err
    assert not (tmp_path / "o").exists()
