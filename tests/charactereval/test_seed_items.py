"""Items of seeds 000 and 001 that docs/conformance.md names one by one: where the official files
come from, the paper's source, the reward model's revision, what every model is sent, the order
and the labels of what is reported, and what the board says about thinking blocks. Literals here
are the seeds' own, so a test fails when the workbench drifts from them."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import pytest

from charactereval_lib.charactereval.aggregate import dimension_averages, metric_means, scores_frame
from charactereval_lib.charactereval.data import load_official_data, load_upstream
from charactereval_lib.charactereval.protocol import ACK_HEAD, COLON, METRICS, ROLE_SPEAKS_FIRST
from charactereval_lib.charactereval.reference import load_paper_table
from charactereval_lib.cli import main
from charactereval_lib.engine import thinking
from charactereval_lib.engine.storage import runs
from charactereval_lib.testing.synthetic import write_synthetic_data

ROOT = Path(__file__).resolve().parents[2]
PLATFORM_RULES = ROOT / "docs" / "platform-rules.md"
REFERENCE_README = ROOT / "data" / "reference" / "README.md"
# Seed 001 §0 (the data files' SHA-256 at the reviewed commit c3d44a6).
SEED_SHA256 = {
    "test_data.jsonl": "6d9723a1484f1d2739bcf388c7960abe1933b7a5a1fddae0170cc9ea7c66dcd8",
    "id2metric.jsonl": "df80ee716124a7deacc6f24ee372a4600b719cdaa79f01cefcdfb286359f1801",
    "character_profiles.json": "d9b4c9f7ab63b89b3c348ae88b43c87872f0f6a5cb06d7f31cbe64a630e6434e",
    "rm_train_data.json": "0fc906584b5edef50918a38868b732150943d941d6b14e80208af15b4b9a1462",
    "annotation_guide.pdf": "e328142202cc25e6ff6a94bd2261751d65462915326ce6f89fe6d2a53a541ae2",
}
RELEASED = {"chatglm3_6b": "ChatGLM3-6B", "baichuan_7b": "Baichuan2-7B", "qwen_7b": "Qwen-7B",
            "internlm_7b": "InternLM-7B", "xverse_7b": "XVERSE-7B"}
# Seed 000 S9 (abbreviations), seed 001 row 4 (names as in id2metric), in the paper's order.
SEED_METRICS = [
    ("Fluency", "对话流利度", "Flu"), ("Coherence", "对话连贯性", "Coh"), ("Consistency", "对话一致性", "Cons"),
    ("Exposure", "知识曝光度", "KE"), ("Accuracy", "知识准确率", "KA"), ("Hallucination", "知识幻觉性", "KH"),
    ("Behavior", "行为一致性", "PB"), ("Utterance", "言语一致性", "PU"), ("Humanlikeness", "类人程度", "HL"),
    ("Communication_skills", "交流技巧", "CS"), ("Diversity", "表现多样性", "ED"), ("Empathy", "共情度", "Emp"),
]
# The order compute_score.py prints on the full data: first appearance in the scored rows.
FIRST_APPEARANCE = ["Accuracy", "Communication_skills", "Coherence", "Diversity", "Fluency", "Exposure", "Utterance",
                    "Consistency", "Behavior", "Hallucination", "Empathy", "Humanlikeness"]


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def small_data(tmp_path):
    return load_official_data(write_synthetic_data(tmp_path / "data", 40), verify=False)


# --- 000-01, 001-01, 001-02: where the files come from ------------------------------------------------


def test_the_upstream_pin_serves_the_bytes_the_seeds_reviewed():
    upstream = load_upstream()
    assert upstream.repository == "morecry/CharacterEval"
    assert upstream.commit == "fa232e6a9c3ec5d074240333fbffdf015b79533f"
    # The reviews read c3d44a6; every file they give a digest for has it at the pinned commit.
    for name, digest in SEED_SHA256.items():
        assert upstream.file(name).sha256 == digest, name
    rules = flat(PLATFORM_RULES.read_text(encoding="utf-8"))
    assert "`c3d44a6` (2025-05-28)" in rules and "`fa232e6` (2024-11-20" in rules


def test_a_released_generation_is_held_to_its_git_blob_digest_and_its_sha256_recorded(tmp_path):
    from _reward_support import released_generations
    from charactereval_lib.charactereval.data import verify_files
    from charactereval_lib.charactereval.reproduce import released_file, reproduce

    upstream = load_upstream()
    for key in RELEASED:
        pinned = upstream.file(released_file(key))
        assert pinned.sha256 is None and len(pinned.git_blob_sha1) == 40
    # Any other bytes under a released name are refused by the blob digest alone.
    (tmp_path / "results").mkdir()
    for key in RELEASED:
        (tmp_path / "results" / released_file(key)).write_text("[]", encoding="utf-8")
    problems = verify_files(tmp_path / "results", ("results",))
    assert len(problems) == 5 and all("git blob SHA-1 mismatch" in p for p in problems)
    # What is scored is recorded by its SHA-256.
    data, files = released_generations(tmp_path, samples=2)
    document = reproduce(tmp_path / "staging", data=data, files=files)
    for f in document["files"]:
        assert f["sha256"] == hashlib.sha256((tmp_path / f["file"]).read_bytes()).hexdigest()


# --- 000-02: Table 4's provenance --------------------------------------------------------------------


def test_table4_names_its_latex_source_and_the_table_holds_what_the_reviews_found():
    from charactereval_lib.charactereval.doctor import EXPECTED_ROWS_PER_METRIC
    from charactereval_lib.charactereval.paper_table import PAPER_LATEX

    digest = "f98299737e75bfb7002e47a76a67161246fbf1286c7be43f8ccd5800b50d6c17"
    assert PAPER_LATEX == {"arxiv": "2401.01275v2", "file": "acl_latex.tex", "lines": 785, "sha256": digest}
    assert digest in REFERENCE_README.read_text(encoding="utf-8")
    # Seed 000 S9, read in the LaTeX: ChatGLM3-6B's Conversational Ability is the unweighted mean
    # of its three metrics (3.399), not the row-weighted one (3.429).
    row = load_paper_table().loc["ChatGLM3-6B"]
    names = {"Fluency": "Flu", "Coherence": "Coh", "Consistency": "Cons"}
    weighted = sum(row[m] * EXPECTED_ROWS_PER_METRIC[a] for m, a in names.items()) / sum(
        EXPECTED_ROWS_PER_METRIC[a] for a in names.values())
    assert round(weighted, 3) == 3.429 and row["conversational_ability_avg"] == 3.399
    assert abs(sum(row[m] for m in names) / 3 - 3.399) < 0.0007


def test_doctor_checks_a_copy_of_the_papers_latex(official_dir, tmp_path, capsys, monkeypatch):
    from charactereval_lib.charactereval.doctor import paper_latex_check
    from charactereval_lib.charactereval.paper_table import PAPER_LATEX
    from charactereval_lib.engine.storage.pinned import DataError

    copy = tmp_path / "acl_latex.tex"
    copy.write_text("\\documentclass{article}\n", encoding="utf-8")
    assert main(["doctor", "--data-dir", str(official_dir), "--paper-latex", str(copy)]) == 1
    out = capsys.readouterr().out
    got = hashlib.sha256(copy.read_bytes()).hexdigest()
    assert (f"FAIL paper LaTeX source acl_latex.tex (Table 4's provenance) SHA-256: expected {PAPER_LATEX['sha256']}, "
            f"got {got}") in out
    assert "29/30 checks passed" in out
    monkeypatch.setitem(PAPER_LATEX, "sha256", got)
    assert paper_latex_check(copy).ok
    with pytest.raises(DataError, match="cannot read the paper's acl_latex.tex"):
        paper_latex_check(tmp_path / "missing.tex")


# --- 000-03: the reward model's revision --------------------------------------------------------------


def test_the_reward_model_comes_from_the_seeds_revision_without_its_code(tmp_path, monkeypatch):
    import huggingface_hub

    from _reward_support import GOLDEN_DIR
    from charactereval_lib.charactereval.reward import pins
    from charactereval_lib.charactereval.reward.download import download_rm

    asked = []

    def snapshot_download(repo, *, revision, local_dir, allow_patterns, endpoint):
        asked.append((repo, revision, allow_patterns))
        # The tiny checkpoint in the official layout stands in for the 26.5 GB one.
        shutil.copytree(GOLDEN_DIR, local_dir, dirs_exist_ok=True)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert download_rm(tmp_path / "rm") == tmp_path / "rm"
    [(repo, revision, patterns)] = asked
    assert (repo, revision) == ("morecry/BaichuanCharRM", "e953da5f57b86db7adca3a2714b4c3720f5b96a2")
    assert pins.REVISION == "morecry/BaichuanCharRM@e953da5"
    # The repository's Python (modeling_baichuan.py, tokenization_baichuan.py) is never fetched.
    assert not any(p.endswith(".py") for p in patterns) and "tokenizer.model" in patterns


# --- 000-04, 000-43, 001-09, 001-10: the protocol's strings and metrics -------------------------------


def test_the_protocols_punctuation_is_full_width():
    assert COLON == "\uff1a"
    assert ACK_HEAD == "好的\uff01现在我来扮演" and ROLE_SPEAKS_FIRST == "我首先发话\uff1a"
    from charactereval_lib.charactereval.protocol import ACK_TAIL, INSTRUCTION_HEAD

    assert ACK_TAIL == "\u3002" and INSTRUCTION_HEAD.count("\u3002") == 1
    assert not any(c in ":!." for c in ACK_HEAD + ACK_TAIL + ROLE_SPEAKS_FIRST + INSTRUCTION_HEAD)


def test_the_metric_names_and_abbreviations_are_the_seeds():
    assert [(m.metric_en, m.metric_zh, m.abbr) for m in METRICS] == SEED_METRICS
    # The annotation guide's wording (曝光率, 共情性) is not what the reward model reads.
    assert not any(word in m.metric_zh for m in METRICS for word in ("曝光率", "共情性"))


def test_no_metric_is_reversed():
    # Seed 001 row 5: every metric is higher-is-better, Hallucination (KH) included.
    rows = [{"id": i, "metric_en": m.metric_en, "score": 1.0 + (i % 5)} for i in range(10) for m in METRICS]
    means = metric_means(scores_frame(rows)).set_index("metric_en")["mean"]
    assert (means == 3.0).all()
    better = [{**r, "score": 5.0} if r["metric_en"] == "Hallucination" else r for r in rows]
    assert metric_means(scores_frame(better)).set_index("metric_en").loc["Hallucination", "mean"] == 5.0
    averages = dimension_averages(metric_means(scores_frame(better))).set_index("dimension")["mean"]
    assert averages["character_consistency"] == pytest.approx((5.0 + 4 * 3.0) / 5)


# --- 000-18, 001-13: one message list for every model ------------------------------------------------


def test_every_model_gets_the_same_messages_and_no_request_param_changes_them(small_data):
    from charactereval_lib.charactereval.requests import build_request, make_requests
    from charactereval_lib.engine.generation.base import ConfigError, DecodingParams
    from charactereval_lib.engine.generation.openai_backend import build_payload

    sample = small_data.samples[0]
    messages = build_request(sample, small_data)["messages"]
    [request] = make_requests([sample], small_data)
    assert request.messages == messages
    # Open and closed models, presets and extra body keys: the messages are the S3 list, as built.
    for model, preset, extra in (("gpt-4", None, None), ("gpt-3.5-turbo-1106", None, {"reasoning_effort": "low"}),
                                 ("THUDM/chatglm3-6b", "chatglm3", None), ("some/local-model", None, {"top_k": 5})):
        payload = build_payload(model, request.messages, DecodingParams.resolve(preset=preset, request_params=extra))
        assert payload["messages"] == messages and payload["model"] == model
        assert [m["role"] for m in payload["messages"]][:2] == ["user", "assistant"]
    with pytest.raises(ConfigError, match="messages"):
        DecodingParams.resolve(request_params={"messages": [{"role": "system", "content": "x"}]})


# --- 000-40: the order of the metrics -----------------------------------------------------------------


def test_metrics_come_in_the_papers_order_not_in_first_appearance(official_data):
    order: list[str] = []
    for sample in official_data.samples:
        for metric_en, _ in official_data.id2metric.get(str(sample.id), ()):
            if metric_en not in order:
                order.append(metric_en)
    assert order == FIRST_APPEARANCE
    assert ", ".join(FIRST_APPEARANCE) in flat(PLATFORM_RULES.read_text(encoding="utf-8"))
    # Rows in first-appearance order, shuffled, or a subset: the summary's order is the paper's.
    rows = [{"id": i, "metric_en": m, "score": 3.0} for i in range(3) for m in FIRST_APPEARANCE]
    random.Random(0).shuffle(rows)
    paper_order = [name for name, _, _ in SEED_METRICS]
    assert list(metric_means(scores_frame(rows))["metric_en"]) == paper_order
    subset = [r for r in rows if r["metric_en"] != "Accuracy"]
    assert list(metric_means(scores_frame(subset))["metric_en"]) == paper_order


# --- 000-42, 001-22: the platform's overall score; 001-15: thinking blocks on the board ----------------


def board_views(run_dir: Path, data):
    from charactereval_lib.charactereval.eligibility import read

    return read(run_dir, runs.load_manifest(run_dir), {"charactereval": data})


def test_the_overall_is_labelled_a_platform_choice_and_leaves_mbti_out(small_data, tmp_path):
    from charactereval_lib.charactereval.eligibility import HEADLINE, SPEC
    from charactereval_lib.engine.storage import artifacts
    from charactereval_lib.testing.leaderboard_runs import charactereval_run

    assert SPEC.headline == HEADLINE
    assert "a platform choice" in HEADLINE and "the paper has no overall score" in HEADLINE
    run = charactereval_run(tmp_path / "run", small_data, model="m")
    [view] = board_views(run, small_data)
    # The overall is the mean of the three dimension averages of the 12 metrics, nothing else:
    # the paper's MBTI column has no part in it (no run can produce it).
    scores = artifacts.read_jsonl(run / "scores.jsonl").records
    by_metric: dict[str, list[float]] = {}
    for record in scores:
        by_metric.setdefault(record["metric_en"], []).append(record["score"])
    means = {m: sum(v) / len(v) for m, v in by_metric.items()}
    groups = [[m.metric_en for m in METRICS if m.dimension.key == key]
              for key in ("conversational_ability", "character_consistency", "roleplay_attractiveness")]
    assert sorted(map(len, groups)) == [3, 4, 5] and sum(map(len, groups)) == 12
    assert view.score == pytest.approx(sum(sum(means[m] for m in g) / len(g) for g in groups) / 3)
    assert not any("mbti" in m.metric_en.lower() for m in METRICS)


def test_a_scored_thinking_block_keeps_a_run_off_the_board_and_keep_thinking_is_labelled(small_data, tmp_path):
    from charactereval_lib.charactereval.eligibility import SPEC
    from charactereval_lib.testing.leaderboard_runs import charactereval_run

    run = charactereval_run(tmp_path / "run", small_data, model="reasoner")
    [view] = board_views(run, small_data)
    assert view.facts["thinking_blocks_scored"] == 0 and not any(r.startswith("thinking") for r in SPEC.check(view))
    assert view.model == "reasoner"
    # A scored sample's latest reply starts with a block, and the run kept it (--keep-thinking).
    scored = next(s for s in small_data.samples if str(s.id) in small_data.id2metric)
    with open(run / "generations.jsonl", "a", encoding="utf-8") as f:
        reply = f"<think>\n想一想\n</think>\n{scored.role}{COLON}好。"
        f.write(json.dumps({"id": scored.id, "model_output": reply, "status": "ok", "error": None},
                           ensure_ascii=False) + "\n")
    runs.update_manifest(run, generation={"identity": {thinking.KEY: thinking.KEPT}})
    [view] = board_views(run, small_data)
    assert view.facts["thinking_blocks_scored"] == 1
    assert [r for r in SPEC.check(view) if r.startswith("thinking")] == [
        "thinking: 1 scored reply starts with a <think> block that S5 scored as the answer (thinking kept: made "
        "with --keep-thinking, or before the rule)"]
    assert view.model == "reasoner (keep_thinking=True)"
    # Under the default rule S5 removed the block: nothing to hold against the run.
    runs.update_manifest(run, generation={"identity": {thinking.KEY: thinking.REMOVED}})
    [view] = board_views(run, small_data)
    assert view.facts["thinking_blocks_scored"] == 0 and view.model == "reasoner"


# --- 000-54, 001-28: the reward model's agreement with people ----------------------------------------


def test_the_reward_models_agreement_with_its_training_labels_is_called_in_sample(official_data, official_dir,
                                                                                     tmp_path, capsys):
    from tests.charactereval.test_judge_rm_train import annotations, write

    source = write(tmp_path / "rm_train_data.json", annotations(official_data, 3))
    out = tmp_path / "labels.jsonl"
    assert main(["data", "convert-rm-train", "--file", str(source), "--out", str(out), "--dir", str(official_dir)]) == 0
    note = capsys.readouterr().err
    assert "in-sample" in note and "not comparable with the paper's Table 2" in note
    rules = flat(PLATFORM_RULES.read_text(encoding="utf-8"))
    assert "Table 2" in rules and "is not reproduced: the held-out annotations were never released" in rules


# --- 001-03, 000-56: the chatglm3 preset's source -----------------------------------------------------


def test_the_chatglm3_preset_records_its_source(small_data, tmp_path):
    from charactereval_lib.charactereval.requests import generation_task, make_requests
    from charactereval_lib.engine.generation.base import DecodingParams
    from charactereval_lib.engine.generation.engine import run_generation
    from charactereval_lib.engine.generation.offline import OfflineBackend

    requests = make_requests(small_data.samples[:2], small_data)
    for name, preset in (("preset", "chatglm3"), ("plain", None)):
        backend = OfflineBackend("offline-model", DecodingParams.resolve(preset=preset), separator=COLON)
        run_generation(tmp_path / name, requests, backend, generation_task(small_data), progress=False)
    generation = runs.load_manifest(tmp_path / "preset")["generation"]
    source = generation["preset_source"]
    assert (source["repository"], source["revision"], source["file"]) == ("THUDM/chatglm3-6b", "b098244a71",
                                                                         "modeling_chatglm.py")
    assert source["defaults"]["temperature"] == generation["parameters"]["temperature"] == 0.8
    assert source["defaults"]["top_p"] == generation["parameters"]["top_p"] == 0.8
    assert "preset_source" not in runs.load_manifest(tmp_path / "plain")["generation"]


# --- 001-26, 001-31: the released generations' rows and the paper's marking error --------------------


def test_the_released_files_are_named_by_their_table4_rows():
    from charactereval_lib.charactereval.eligibility import RELEASED as BOARD_RELEASED
    from charactereval_lib.charactereval.reproduce import RELEASED_MODELS, released_file

    # Seed 001 C2: the upstream README's "ChatGLM-6B, Baichuan-7B" are the paper's ChatGLM3-6B and
    # Baichuan2-7B, as the file names (chatglm3_6b) and Table 4 say.
    assert RELEASED_MODELS == BOARD_RELEASED == RELEASED
    table = load_paper_table()
    upstream = load_upstream()
    for key, model in RELEASED.items():
        assert model in table.index and upstream.file(released_file(key)).group == "results"


def test_the_papers_underline_error_is_noted_where_the_table_ships():
    consistency = load_paper_table()["Consistency"].sort_values(ascending=False)
    # The paper underlines Baichuan2-7B (3.827) as second best; Baichuan2-13B (3.864) is.
    assert list(consistency.index[:3]) == ["BC-NPC-Turbo", "Baichuan2-13B", "Baichuan2-7B"]
    assert (consistency["Baichuan2-13B"], consistency["Baichuan2-7B"]) == (3.864, 3.827)
    readme = flat(REFERENCE_README.read_text(encoding="utf-8"))
    assert ("the paper underlines Baichuan2-7B's Consistency 3.827 as second best although Baichuan2-13B has 3.864 "
            "(a marking error in the paper, not in this file)") in readme
