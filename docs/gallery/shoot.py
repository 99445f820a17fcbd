"""`make gallery`: the screenshots of docs/reports.md's gallery, one per kind of report, from real
reports rendered the way the demo renders them: the offline backend's replies on the demo's
200-sample subset, scored by the tiny random reward model; a judge and CoSER's four roles played
by the local mock server; the CoSER reproduction from the released evaluation files. Every
command is the command line a user types, run in a scratch workspace in the temporary folder,
whose data folders link to the data this checkout reads (the reports print the path they read it
from). The PNGs (the top of each page as headless Chromium shows it, reduced to a palette) go to
docs/gallery/. Their replies and scores mean nothing, and each report says so at its top.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
WORK = Path(tempfile.gettempdir()) / "charactereval-gallery"
CHROMIUM = "/usr/bin/chromium"
# The top of a report: its title, warnings, contents and first table or figure.
WINDOW = (1280, 1100)
DEMO_RM = ROOT / "models" / "tiny-rm"
TINY_RM_MARK = "official data's text"


def run(*args: str) -> None:
    print("$ charactereval " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "charactereval_lib.cli", *args], cwd=WORK, check=True)


def mock_server(*args: str) -> tuple[subprocess.Popen[str], str]:
    """The mock OpenAI-compatible server on a free port, and its base URL once it listens."""
    server = subprocess.Popen([sys.executable, "-m", "charactereval_lib.testing.mockserver", *args],
                              stdout=subprocess.PIPE, text=True, cwd=WORK)
    line = server.stdout.readline() if server.stdout else ""
    match = re.match(r"listening on (\S+)", line)
    if not match:
        server.kill()
        sys.exit(f"error: the mock server did not start: {line!r}")
    return server, match[1]


def shoot(page: Path, name: str) -> None:
    """The top of ``page`` in headless Chromium, saved as docs/gallery/NAME.png with 256 colours."""
    from PIL import Image

    raw = WORK / f"{name}.raw.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={raw}", page.resolve().as_uri()],
                   check=True, capture_output=True)
    with Image.open(raw) as image:
        image.convert("RGB").quantize(colors=256).save(OUT / f"{name}.png", optimize=True)
    print(f"   {name}.png: {(OUT / f'{name}.png').stat().st_size // 1024} KiB", flush=True)


def main() -> None:
    from charactereval_lib import pipeline

    data = pipeline.data_verify()
    if data.problems:
        sys.exit(f"error: the CharacterEval data at {data.data_dir} is incomplete: {data.problems[0]}")
    coser_problems = pipeline.coser_data_verify(with_results=True)
    if coser_problems:
        sys.exit(f"error: the CoSER data (with its released files) is incomplete: {coser_problems[0]}")
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    # A workspace of its own, its data folders links to the data this checkout reads.
    for folder, target in (("official", data.data_dir), ("coser", pipeline.coser_data_dir())):
        (WORK / "data").mkdir(exist_ok=True)
        (WORK / "data" / folder).symlink_to(target.resolve(), target_is_directory=True)
    for variable in ("CHARACTEREVAL_DATA_DIR", "COSER_DATA_DIR"):
        os.environ.pop(variable, None)
    os.environ.update({"CHARACTEREVAL_HOME": str(WORK), "TQDM_DISABLE": "1"})

    # The demo's model when `make demo` made it, else one made the same way.
    rm = DEMO_RM
    if not (rm / "README.md").exists() or TINY_RM_MARK not in (rm / "README.md").read_text(encoding="utf-8"):
        rm = WORK / "models" / "tiny-rm"
        run("rm", "make-tiny", str(rm), "--from-data", "--vocab", "8000")
    demo = (ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8").replace("rm: models/tiny-rm", f"rm: {rm}")
    (WORK / "demo.yaml").write_text(demo, encoding="utf-8")
    run("batch", "demo.yaml", "--quiet")

    judge, judge_url = mock_server("--default-action", "judge")
    try:
        run("score", "demo-offline-a", "--scorer", "judge", "--judge-model", "mock-judge", "--base-url", judge_url,
            "--no-api-key", "--quiet")
    finally:
        judge.kill()
        judge.wait()
    run("report", "demo-offline-a")
    run("report", "demo-offline-a", "--scorer", "judge")

    actors, actors_url = mock_server("--coser-script")
    try:
        for name, actor in (("coser-a", "mock-actor-a"), ("coser-b", "mock-actor-b")):
            run("coser", "run", name, "--preset", "smoke", "--actor-model", actor, "--base-url", actors_url,
                "--no-api-key", "--quiet")
    finally:
        actors.kill()
        actors.wait()
    run("coser", "report", "coser-a")
    run("coser", "compare", "coser-a", "coser-b", "--out", "coser-comparison")
    # BLEU/ROUGE-L of all twelve files take minutes; the report says they were skipped.
    run("reproduce", "--benchmark", "coser", "--out", "reproduction", "--no-metrics", "--n-boot", "200", "--quiet")

    outputs = WORK / "outputs"
    shoot(outputs / "demo-offline-a" / "report.html", "report")
    shoot(outputs / "demo-comparison" / "comparison.html", "comparison")
    shoot(outputs / "demo-offline-a" / "report-judge-mock-judge.html", "judge-report")
    shoot(outputs / "coser-a" / "report.html", "coser-report")
    shoot(WORK / "coser-comparison" / "comparison.html", "coser-comparison")
    shoot(WORK / "reproduction" / "reproduction.html", "reproduction")


if __name__ == "__main__":
    main()
