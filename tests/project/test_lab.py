"""`make lab`: Jupyter Lab from its own environment (.venv-lab, the lab extra) on the runs'
notebooks, its kernels from the project's environment. The server test starts Lab headless as
`make lab` does (cli.lab), executes a run's analysis notebook through it over the kernel's
websocket, and stops the server by its PID."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest

from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.cli import lab, main
from charactereval_lib.engine.reports import notebook as report
from charactereval_lib.engine.storage import runs
from charactereval_lib.testing.synthetic import write_synthetic_run

ROOT = Path(__file__).resolve().parents[2]
# The Lab environment the server test needs: jupyterlab (the lab extra) importable by this python.
LAB_PYTHON_ENV = "CHARACTEREVAL_LAB_PYTHON"
LAB_PYTHON = Path(os.environ.get(LAB_PYTHON_ENV) or ROOT / ".venv-lab" / "bin" / "python")


def lab_python_or_skip() -> Path:
    found = LAB_PYTHON.is_file() and subprocess.run([str(LAB_PYTHON), "-c", "import jupyterlab"],
                                                    capture_output=True).returncode == 0
    if not found:
        pytest.skip(f"jupyterlab is not importable by {LAB_PYTHON}: the Lab server test needs the lab extra's "
                    f"environment (`make lab` makes .venv-lab; or set {LAB_PYTHON_ENV} to a python with "
                    f"{', '.join(lab.requirements()) or 'jupyterlab'})")
    return LAB_PYTHON


def test_the_lab_extra_is_what_make_lab_installs_and_it_stays_out_of_the_project_environment():
    assert lab.requirements() == ["jupyterlab>=4.2"]
    done = subprocess.run(["make", "--no-print-directory", "-n", "-B", "lab", "PYTHON=python3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    installs = [line for line in done.stdout.splitlines() if " pip install" in line and "--upgrade pip" not in line]
    # .venv gets the package with its test extra; the lab extra goes into .venv-lab only.
    assert all(line.startswith(".venv/bin/python") for line in installs if ".[test]" in line)
    assert any(line.startswith(".venv-lab/bin/python") and "requirements.txt" in line for line in installs)
    assert not any("lab]" in line or "jupyterlab" in line for line in installs if line.startswith(".venv/"))
    assert ".venv/bin/python -m charactereval_lib.cli.lab open --lab-python .venv-lab/bin/python" in done.stdout


def test_open_without_the_lab_environment_is_one_line(tmp_path, capsys):
    assert lab.main(["open", "--lab-python", str(tmp_path / "none"), "--run", "x"]) == 2
    assert "no Lab environment (`make lab` makes it)" in capsys.readouterr().err


def test_the_server_environment_knows_the_workspace_and_the_project_kernel(tmp_path):
    env = lab.server_environment(tmp_path, Path(sys.prefix))
    assert env[runs.WORKSPACE_ENV] == str(tmp_path)
    assert env["JUPYTER_PATH"].split(os.pathsep)[0] == str(Path(sys.prefix) / "share" / "jupyter")
    argv = lab.server_command("py", tmp_path, tmp_path / "r" / "analyse.ipynb", port=8, token="t")
    assert argv[:3] == ["py", "-m", "jupyterlab"] and "--no-browser" in argv and argv[-1].endswith("analyse.ipynb")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(port: int, token: str, method: str, path: str, body: dict | None = None) -> dict:
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
    return json.loads(text) if text else {}


async def execute_through_server(port: int, token: str, kernel_id: str, cells: list[str]) -> list[dict]:
    """Each cell as an execute_request on the kernel's websocket (the Jupyter Server protocol Lab
    uses); returns each cell's reply content and its iopub outputs, in order."""
    import aiohttp

    session_id = uuid.uuid4().hex
    results = []
    url = f"ws://127.0.0.1:{port}/api/kernels/{kernel_id}/channels?session_id={session_id}"
    async with aiohttp.ClientSession(headers={"Authorization": f"token {token}"}) as client, \
            client.ws_connect(url, max_msg_size=0) as ws:
        for code in cells:
            msg_id = uuid.uuid4().hex
            await ws.send_json({
                "header": {"msg_id": msg_id, "username": "test", "session": session_id, "msg_type": "execute_request",
                           "version": "5.3", "date": datetime.now(timezone.utc).isoformat()},
                "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                            "allow_stdin": False, "stop_on_error": True},
            })
            outputs: list[dict] = []
            reply = idle = None
            while reply is None or not idle:
                frame = await asyncio.wait_for(ws.receive(), timeout=600)
                assert frame.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY), frame
                if frame.type != aiohttp.WSMsgType.TEXT:
                    continue  # a comm's binary buffers: no cell output of these notebooks
                message = json.loads(frame.data)
                if message.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = message["header"]["msg_type"]
                if message["channel"] == "shell" and kind == "execute_reply":
                    reply = message["content"]
                elif kind == "status":
                    idle = message["content"]["execution_state"] == "idle"
                elif kind in ("stream", "display_data", "execute_result", "error"):
                    outputs.append({"type": kind, **message["content"]})
            results.append({"reply": reply, "outputs": outputs})
    return results


@pytest.mark.slow
def test_make_lab_opens_a_run_notebook_that_runs_top_to_bottom_in_lab(tmp_path, official_dir, monkeypatch, capsys):
    lab_python = lab_python_or_skip()
    for name in ("CHARACTEREVAL_DATA_DIR", runs.WORKSPACE_ENV):
        monkeypatch.delenv(name, raising=False)
    workspace = tmp_path / "ws"
    (workspace / "outputs").mkdir(parents=True)
    monkeypatch.chdir(workspace)
    data = load_official_data(official_dir)
    write_synthetic_run(workspace / "outputs" / "m1", dataclasses.replace(data, samples=data.samples[:60]), seed=1)
    assert main(["data", "use", str(official_dir)]) == 0
    notebook = lab.run_notebook("m1")  # what `make lab RUN=m1` opens
    assert notebook == workspace / "outputs" / "m1" / "analyse.ipynb" and notebook.is_file()
    capsys.readouterr()

    port, token = free_port(), uuid.uuid4().hex
    # Lab's own state (settings, runtime files) in the test's folder, not the user's home.
    jupyter_home = tmp_path / "jupyter"
    env = {**lab.server_environment(workspace.absolute(), Path(sys.prefix)),
           "JUPYTER_CONFIG_DIR": str(jupyter_home / "config"), "JUPYTER_RUNTIME_DIR": str(jupyter_home / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(jupyter_home / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(jupyter_home / "workspaces")}
    log = (tmp_path / "lab.log").open("wb")
    with report.kernel_environment():  # the kernel imports this checkout's package
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        server = subprocess.Popen(lab.server_command(lab_python, workspace / "outputs", notebook, port=port, token=token),
                                  env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (tmp_path / "lab.log").read_text()[-3000:]
            try:
                api(port, token, "GET", "/api/status")
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "lab.log").read_text()[-3000:]
                time.sleep(0.5)
        session = api(port, token, "POST", "/api/sessions",
                      {"path": "m1/analyse.ipynb", "type": "notebook", "kernel": {"name": "python3"}})
        node = nbformat.read(str(notebook), as_version=4)
        cells = [c.source for c in node.cells if c.cell_type == "code"]
        probe = "import sys, charactereval_lib, os; print(sys.executable, charactereval_lib.__file__, os.getcwd())"
        results = asyncio.run(execute_through_server(port, token, session["kernel"]["id"], [*cells, probe]))
        failed = [(i, r["reply"].get("ename"), r["reply"].get("evalue")) for i, r in enumerate(results)
                  if r["reply"]["status"] != "ok"]
        assert not failed
        text = json.dumps([r["outputs"] for r in results], ensure_ascii=False)
        assert f"Official data: {official_dir}" in text and "Official data not available" not in text
        executable, package, cwd = results[-1]["outputs"][0]["text"].split()
        assert Path(executable) == Path(sys.executable)  # the project's kernel, not the Lab environment's
        assert Path(package).is_relative_to(ROOT) and Path(cwd) == notebook.parent
        api(port, token, "DELETE", f"/api/sessions/{session['id']}")
    finally:
        if server.poll() is None:
            os.kill(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
        log.close()
    assert server.returncode is not None
