"""A third benchmark defined only under tests/ (``tests/toybench``), registered through
``$CHARACTEREVAL_BENCHMARKS``, runs end to end through the library's command line and ``batch``
(run -> summarize -> report) against the local mock OpenAI server, with no library change."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from charactereval_lib.cli import main
from charactereval_lib.engine.leaderboard.site import read_run_data
from charactereval_lib.engine.registry import benchmarks
from charactereval_lib.testing.mockserver import MockServer, echo_reply, request_key

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = ["甲", "乙", "丙", "丁"]


@pytest.fixture
def toybench(tmp_path, monkeypatch):
    """The toy registered, its data written, and a mock server answering (question 丁 fails)."""
    monkeypatch.setenv(benchmarks.ENV, "tests.toybench:BENCHMARK")
    data = tmp_path / "toydata"
    data.mkdir()
    # The first two answers are what the mock server replies: two of three answered are correct.
    lines = []
    for i, question in enumerate(QUESTIONS):
        key = request_key([{"role": "user", "content": question}])
        lines.append({"id": i, "question": question, "answer": echo_reply(key) if i < 2 else "wrong"})
    (data / "questions.jsonl").write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines),
                                          encoding="utf-8")
    failing = request_key([{"role": "user", "content": QUESTIONS[3]}])
    with MockServer(plan={failing: ["bad400"]}) as server:
        yield data, server


def test_the_toy_is_registered_beside_the_built_ins(toybench):
    assert {"charactereval", "coser", "toybench"} <= set(benchmarks.registry())


def test_the_command_line_runs_summarizes_and_reports_the_toy(toybench, tmp_path, capsys):
    data, server = toybench
    run = tmp_path / "runs" / "toy"
    code = main(["toybench", "run", str(run), "--data-dir", str(data), "--set", "model=m",
                 "--set", f"base_url={server.base_url}", "--quiet"])
    assert code == 1 and "question 3" in capsys.readouterr().err  # the failed question is named
    assert json.loads((run / "run.json").read_text(encoding="utf-8"))["benchmark"] == "toybench"
    assert main(["toybench", "summarize", str(run)]) == 0
    summary = json.loads((run / "toy_summary.json").read_text(encoding="utf-8"))
    assert summary == {"n": 3, "failed": 1, "correct": 2, "accuracy": 2 / 3}
    assert main(["toybench", "report", str(run), "--set", "title=Toy <report>"]) == 0
    page = (run / "report.html").read_text(encoding="utf-8")
    assert "Toy &lt;report&gt;" in page and "1 question(s) failed" in page and "Rendered by charactereval" in page
    # The other benchmarks' commands refuse the toy's run and name the commands that read it.
    capsys.readouterr()
    assert main(["summarize", str(run)]) == 2
    assert "a ToyBench run, not a CharacterEval one; `charactereval toybench summarize`" in capsys.readouterr().err


def test_bad_toy_settings_are_one_line_errors(toybench, tmp_path, capsys):
    data, _ = toybench
    code = main(["toybench", "run", str(tmp_path / "r"), "--data-dir", str(data), "--set", "model=m",
                 "--set", "colour=red"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: toybench run: unknown key(s) ['colour']") and "\n" not in err


def test_batch_runs_the_toy_through_its_stages(toybench, tmp_path, capsys):
    data, server = toybench
    config = tmp_path / "batch.yaml"
    config.write_text(f"""output_dir: {tmp_path / "out"}
benchmark: toybench
models:
  - name: toy-a
    data_dir: {data}
    run: {{model: m, base_url: "{server.base_url}"}}
    report: {{title: Toy A}}
""", encoding="utf-8")
    assert main(["batch", str(config), "--quiet"]) == 1  # one question failed: reported, exit 1
    out = capsys.readouterr().out
    assert "ok      toy-a:" in out and "1 sample(s) failed" in out
    run = tmp_path / "out" / "toy-a"
    assert json.loads((run / "toy_summary.json").read_text(encoding="utf-8"))["correct"] == 2
    assert "Toy A" in (run / "report.html").read_text(encoding="utf-8")
    summary = json.loads((tmp_path / "out" / "batch-summary.json").read_text(encoding="utf-8"))
    assert [m["name"] for m in summary["models"]] == ["toy-a"]


def test_a_benchmark_that_cannot_load_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv(benchmarks.ENV, "tests.no_such_benchmark:BENCHMARK")
    assert main(["--version"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: $CHARACTEREVAL_BENCHMARKS: cannot load 'tests.no_such_benchmark:BENCHMARK'")


def test_the_real_command_finds_the_toy_through_the_environment(toybench):
    done = subprocess.run([sys.executable, "-m", "charactereval_lib.cli", "toybench", "--help"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0 and "run" in done.stdout and "summarize" in done.stdout


def _toy_run(run: Path, data: Path, server, model: str) -> int:
    return main(["toybench", "run", str(run), "--data-dir", str(data), "--set", f"model={model}",
                 "--set", f"base_url={server.base_url}", "--quiet"])


def test_the_toy_is_on_the_leaderboard_with_its_rules_anchor_and_explorer(toybench, tmp_path, capsys):
    """Its board and explorer come from its own declaration (``tests/toybench/board.py``): the
    reference model's run reproduces the anchor, two runs that cannot be told apart share rank 1,
    runs that break a rule are not ranked, and each sample's detail is drawn from typed sections."""
    data, failing = toybench
    runs_dir = tmp_path / "runs"
    small = tmp_path / "small"
    small.mkdir()
    (small / "questions.jsonl").write_text("".join((data / "questions.jsonl").read_text(encoding="utf-8")
                                                   .splitlines(keepends=True)[:2]), encoding="utf-8")
    with MockServer() as server:
        assert _toy_run(runs_dir / "reference", data, server, "toy-reference") == 0
        assert _toy_run(runs_dir / "other", data, server, "other") == 0
        assert _toy_run(runs_dir / "small", small, server, "small") == 0
    assert _toy_run(runs_dir / "failed", data, failing, "failed") == 1
    for name, extra in (("site", []), ("redacted", ["--redact"])):
        assert main(["leaderboard", str(runs_dir), "--out", str(tmp_path / name),
                     "--data-dir", str(tmp_path / "no-data"), *extra]) == 0
    capsys.readouterr()
    content = json.loads((tmp_path / "site" / "leaderboard.json").read_text(encoding="utf-8"))
    [board] = [b for b in content["boards"] if b["benchmark"] == "toybench"]
    assert board["anchor"]["status"] == "reproduced" and board["anchor"]["run"] == "reference"
    ranked = {r["run"]: r for r in board["rows"]}
    assert ranked["reference"]["rank"] == ranked["other"]["rank"] == 1 and ranked["reference"]["score"] == 0.5
    assert ranked["small"]["reasons"] == ["enough-questions: 2 question(s) answered, the board needs 3"]
    assert ranked["failed"]["reasons"] == ["all-answered: 1 question(s) failed"] and ranked["failed"]["rank"] is None
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "<code>all-answered</code>" in index and "<code>enough-questions</code>" in index
    page = tmp_path / "site" / "runs" / ranked["reference"]["page"]
    detail = read_run_data(tmp_path / "site", page.name)[1]
    assert [[s["kind"] for s in d] for d in detail] == [["kv", "text", "computation"]] * 4
    failed = tmp_path / "site" / "runs" / ranked["failed"]["page"] / "detail-0.js"
    assert "Failure (left out of the accuracy)" in failed.read_text(encoding="utf-8")
    assert "charactereval toybench report" in (page / "index.html").read_text(encoding="utf-8")
    redacted = read_run_data(tmp_path / "redacted", page.name)[1]
    assert all(s["kind"] != "text" for d in redacted for s in d)  # no reply left


def test_the_toys_own_notebook_is_found_through_its_declaration(toybench, tmp_path, capsys):
    """A notebook shipped beside the toy's code, outside the library's notebooks/."""
    run = tmp_path / "run"
    run.mkdir()
    assert main(["notebook", "toy-answers", str(run)]) == 0
    copy = json.loads((run / "toy_answers.ipynb").read_text(encoding="utf-8"))
    assert any(f"run_dir = {json.dumps(str(run.absolute()))}" in "".join(c["source"]) for c in copy["cells"])
