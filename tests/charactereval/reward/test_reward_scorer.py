"""Scoring runs on a synthetic data directory and a tiny checkpoint: S6 text, incremental
records, resume after SIGKILL without loss or duplicates, skip rules, shards that merge, dry
run, verify, and the rows' validation."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from _reward_support import SYNTH_PROFILES, write_rows
from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.charactereval.protocol import RM_CONTEXT, RM_DIMENSION, RM_RESPONSE, RM_ROLEINFO
from charactereval_lib.charactereval.reward import scorer
from charactereval_lib.charactereval.reward.checkpoint import checkpoint_identity
from charactereval_lib.charactereval.reward.inputs import build_rm_text
from charactereval_lib.charactereval.reward.model import sigmoid_faithful, to_score
from charactereval_lib.charactereval.reward.tokenizer import load_tokenizer
from charactereval_lib.engine.storage import artifacts, runs
from tests.generation_support import kill_mid_run, slow_writes

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.usefixtures("private_digest_cache")


def settings(**kw) -> scorer.ScorerSettings:
    return scorer.ScorerSettings(progress=False, **kw)


def latest_records(path: Path) -> list[dict]:
    return artifacts.read_jsonl(path).records


def test_build_rm_text_is_the_s6_template():
    profile = SYNTH_PROFILES["甲乙"]
    text = build_rm_text(profile, "丙\uff1a你好 ", "甲乙\uff1a嗯", "共情度")
    assert text == (
        "<RoleInfo>\n\n" + str(profile) + "\n\n<Context>\n\n丙\uff1a你好 \n\n<Response>\n\n甲乙\uff1a嗯\n\n<Dimension>\n\n共情度"
    )
    assert text.startswith(RM_ROLEINFO) and RM_CONTEXT in text and RM_RESPONSE in text and RM_DIMENSION in text
    assert "'性格': 'it\\'s \"quoted\"'" in text  # Python repr quoting is kept


@pytest.mark.slow
def test_scores_match_a_direct_faithful_computation(setup, rm_dir):
    data, _, run_dir, rows = setup
    report = scorer.score_run(run_dir, rm_dir, data, settings())
    assert report.scored == len(rows) and report.already_scored == 0
    records = latest_records(run_dir / layout.SCORES)
    assert [(r["id"], r["metric_en"]) for r in records] == [(r["id"], r["metric_en"]) for r in rows]
    tok = load_tokenizer(rm_dir)
    from charactereval_lib.charactereval.reward.checkpoint import load_model

    model = load_model(rm_dir)
    sha = checkpoint_identity(rm_dir)["sha256"]
    samples = data.by_id()
    for row, rec in zip(rows, records):
        s = samples[row["id"]]
        text = build_rm_text(data.profiles[s.role], s.context, row["model_output"], row["metric_zh"])
        ids, truncated = tok.rm_input_ids(text)
        sigmoid = sigmoid_faithful(model, ids)
        assert rec["sigmoid"] == sigmoid and rec["score"] == to_score(sigmoid)
        assert rec["n_tokens"] == len(ids) and rec["truncated"] == truncated
        assert rec["mode"] == "faithful" and rec["checkpoint_sha256"] == sha
        assert rec["input_sha256"] == scorer.text_sha256(text)
    manifest = runs.load_manifest(run_dir)["scoring"]
    assert manifest["mode"] == "faithful" and manifest["checkpoint"]["sha256"] == sha
    assert manifest["protocol_version"] and manifest["device"] == "cpu"
    assert "meaningless" in manifest["checkpoint"]["label"]


@pytest.mark.slow
def test_rerun_skips_scored_rows_and_rescores_changed_ones(setup, rm_dir):
    data, _, run_dir, rows = setup
    scorer.score_run(run_dir, rm_dir, data, settings())
    again = scorer.score_run(run_dir, rm_dir, data, settings())
    assert again.scored == 0 and again.already_scored == len(rows)
    rows[3]["model_output"] += "！"
    (run_dir / layout.ROWS).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    changed = scorer.score_run(run_dir, rm_dir, data, settings())
    assert changed.scored == 1
    latest = artifacts.latest_by_key(latest_records(run_dir / layout.SCORES), "id", "metric_en")
    assert len(latest) == len(rows)
    # A different mode is a different scoring: every row is scored again.
    fast = scorer.score_run(run_dir, rm_dir, data, settings(mode="fast"))
    assert fast.scored == len(rows)
    records = latest_records(run_dir / layout.SCORES)
    faithful = {(r["id"], r["metric_en"], r["input_sha256"]): r["sigmoid"] for r in records if r["mode"] == "faithful"}
    fast_values = [(faithful[(r["id"], r["metric_en"], r["input_sha256"])], r["sigmoid"]) for r in records if r["mode"] == "fast"]
    stats = scorer.compare_modes(*zip(*fast_values))
    assert stats["exact_equal_fraction"] >= 0.99 and stats["max_diff_grid_steps"] <= 1


@pytest.mark.slow
def test_shards_split_by_sample_and_merge(setup, rm_dir, monkeypatch):
    data, _, run_dir, rows = setup
    reference_dir = run_dir.parent / "reference"
    write_rows(reference_dir, run_dir.parent / "data")
    scorer.score_run(reference_dir, rm_dir, data, settings())
    seen = []
    for i in (1, 2, 3):
        report = scorer.score_run(run_dir, rm_dir, data, settings(shard=(i, 3)))
        part = latest_records(run_dir / f"scores.shard-{i}-of-3.jsonl")
        assert report.scored == len(part) and {scorer.shard_of(r["id"], 3) for r in part} <= {i}
        seen += [(r["id"], r["metric_en"]) for r in part]
    assert sorted(seen) == sorted((r["id"], r["metric_en"]) for r in rows)
    assert set(runs.load_manifest(run_dir)["scoring"]["shards"]) == {"1/3", "2/3", "3/3"}

    def no_model(*args, **kwargs):
        raise AssertionError("merging finished shards must not load the model")

    monkeypatch.setattr("charactereval_lib.charactereval.reward.checkpoint.load_model", no_model)
    merged = scorer.score_run(run_dir, rm_dir, data, settings())
    assert merged.merged_from_shards == len(rows) and merged.scored == 0
    assert scorer.score_run(run_dir, rm_dir, data, settings()).merged_from_shards == 0
    key = lambda r: (r["id"], r["metric_en"])  # noqa: E731
    assert sorted(latest_records(run_dir / layout.SCORES), key=key) == sorted(latest_records(reference_dir / layout.SCORES), key=key)


def test_a_second_writer_is_refused(setup, rm_dir):
    data, _, run_dir, _ = setup
    with scorer.scoring_job(run_dir / layout.SCORES).locked():
        with pytest.raises(runs.RunError, match="another scorer is writing it"):
            scorer.score_run(run_dir, rm_dir, data, settings())
    # A shard has its own file and lock.
    with scorer.scoring_job(run_dir / layout.SCORES).locked():
        assert scorer.score_run(run_dir, rm_dir, data, settings(shard=(1, 2))).scored > 0


def test_dry_run_writes_inputs_without_a_model(setup, rm_dir, monkeypatch):
    data, _, run_dir, rows = setup
    monkeypatch.setattr("charactereval_lib.charactereval.reward.checkpoint.load_model", lambda *a, **k: 1 / 0)
    assert scorer.dry_run(run_dir, data, rm_dir) == len(rows)
    records = latest_records(run_dir / scorer.RM_INPUTS)
    tok = load_tokenizer(rm_dir)
    samples = data.by_id()
    for row, rec in zip(rows, records):
        s = samples[row["id"]]
        assert rec["text"] == build_rm_text(data.profiles[s.role], s.context, row["model_output"], row["metric_zh"])
        ids, truncated = tok.rm_input_ids(rec["text"])
        assert (rec["n_tokens"], rec["truncated"]) == (len(ids), truncated)
    assert not (run_dir / layout.SCORES).exists()
    scorer.dry_run(run_dir, data, None)
    assert "n_tokens" not in latest_records(run_dir / scorer.RM_INPUTS)[0]


def test_verify_reports_equality(setup, rm_dir):
    data, _, run_dir, _ = setup
    report = scorer.verify_run(run_dir, rm_dir, data, settings(mode="fast", fast_token_budget=2048), 12)
    assert report["rows"] >= 12 and report["exact_equal_fraction"] >= 0.99 and report["max_diff_grid_steps"] <= 1
    saved = json.loads((run_dir / scorer.VERIFY_REPORT).read_text(encoding="utf-8"))
    assert saved["exact_equal"] == report["exact_equal"]
    assert not (run_dir / layout.SCORES).exists()


def test_compare_modes_counts_grid_steps():
    stats = scorer.compare_modes([0.5, 0.75, 0.25], [0.5, 0.75 + 2**-8, 0.25 + 3 * 2**-9])
    assert stats["exact_equal"] == 1 and stats["max_diff_grid_steps"] == 3 and stats["rows_beyond_one_step"] == 1


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda r: r.update(id=99999), "id 99999 is not a test sample"),
        (lambda r: r.update(role="丁"), "role '丁' but sample"),
        (lambda r: r.update(metric_zh="流利"), "unknown metric"),
        (lambda r: r.pop("model_output"), "missing field(s) ['model_output']"),
        (lambda r: r.update(model_output=None), "model_output is NoneType"),
    ],
)
def test_bad_rows_are_named(setup, edit, message):
    data, _, run_dir, rows = setup
    edit(rows[2])
    with pytest.raises(runs.RunError, match=r"rows.jsonl: row 3: " + __import__("re").escape(message)):
        scorer.row_inputs(rows, data)


def test_shard_parsing_and_balance():
    assert scorer.parse_shard("2/4") == (2, 4)
    for bad in ("0/4", "5/4", "x", "1-4"):
        with pytest.raises(runs.RunError):
            scorer.parse_shard(bad)
    counts = [0, 0, 0, 0]
    for i in range(4000):
        counts[scorer.shard_of(i, 4) - 1] += 1
    assert min(counts) > 900 and [scorer.shard_of(i, 4) for i in range(50)] == [scorer.shard_of(i, 4) for i in range(50)]


CHILD = slow_writes(0.05) + textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from charactereval_lib.charactereval.data import load_official_data
    from charactereval_lib.charactereval.reward.scorer import ScorerSettings, score_run
    data = load_official_data(sys.argv[1], verify=False)
    score_run(Path(sys.argv[2]), Path(sys.argv[3]), data,
              ScorerSettings(mode=sys.argv[4], fast_token_budget=300, progress=False))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["faithful", "fast"])
def test_killed_run_resumes_without_loss_or_duplicates(setup, rm_dir, mode, tmp_path, request):
    data, data_dir, run_dir, rows = setup
    scores = run_dir / layout.SCORES
    kill_mid_run(request, CHILD, [str(data_dir), str(run_dir), str(rm_dir), mode], scores, REPO,
                 env={"XDG_CACHE_HOME": str(tmp_path / "cache")}, at_least=6)
    before = latest_records(scores)
    assert 6 <= len(before) < len(rows), "the kill must land mid-run"
    # As if the kill had hit mid-write: a torn last line.
    with open(scores, "ab") as f:
        f.write(b'{"id": 1, "metric_en": "Flu')

    report = scorer.score_run(run_dir, rm_dir, data, settings(mode=mode, fast_token_budget=300))
    assert report.already_scored == len(before) and report.scored == len(rows) - len(before)
    assert any("torn" in w for w in report.warnings)
    records = latest_records(scores)
    keys = [(r["id"], r["metric_en"]) for r in records]
    assert len(keys) == len(set(keys)) == len(rows)
    assert records[: len(before)] == before

    reference = run_dir.parent / "uninterrupted"
    write_rows(reference, data_dir)
    scorer.score_run(reference, rm_dir, data, settings(mode=mode, fast_token_budget=300))
    expected = {(r["id"], r["metric_en"]): r["sigmoid"] for r in latest_records(reference / layout.SCORES)}
    assert {(r["id"], r["metric_en"]): r["sigmoid"] for r in records} == expected


@pytest.mark.conformance
def test_cli_dry_run_on_the_official_data(official_dir, tmp_path, capsys):
    """The score command's dry run joins real contexts and profiles (skipped without data)."""
    data_dir = str(official_dir)
    from charactereval_lib.cli import main

    data = load_official_data(data_dir)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rows = []
    for sample in data.samples[:5]:
        for en, zh in data.id2metric.get(str(sample.id), ()):
            rows.append({"id": sample.id, "role": sample.role, "novel_name": sample.novel_name,
                         "metric_en": en, "metric_zh": zh, "model_output": sample.role + "\uff1a……"})
    (run_dir / layout.ROWS).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert main(["score", str(run_dir), "--dry-run", "--data-dir", data_dir]) == 0
    records = latest_records(run_dir / scorer.RM_INPUTS)
    by_id = data.by_id()
    for row, rec in zip(rows, records):
        sample = by_id[row["id"]]
        assert rec["text"].startswith("<RoleInfo>\n\n" + str(data.profiles[sample.role]) + "\n\n<Context>\n\n" + sample.context)
        assert rec["text"].endswith("\n\n<Dimension>\n\n" + row["metric_zh"])
    assert "no model was run" in capsys.readouterr().out
