"""The README's Python snippets run as written: each in a fresh process, from an empty folder.

A snippet is a fenced ``python`` block. Each defines its own input (a new topic, demo records
produced with the project's helpers), writes under relative ``var/readme/`` paths and waits for
its stream, so it runs from any folder with the project installed and the local broker up.
Being independent, the snippets run two at a time (:func:`snippet_runs`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from spark_ext.jobrun import REPO

README = REPO / "README.md"


def snippets(text: str) -> list[tuple[str, int, str]]:
    """``(section heading, line, code)`` of every fenced python block."""
    out, heading = [], ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line
        if line.strip() == "```python":
            start = i + 1
            end = lines.index("```", start)
            out.append((heading, start + 1, "\n".join(lines[start:end]) + "\n"))
            i = end
        i += 1
    return out


SNIPPETS = snippets(README.read_text())


def test_every_python_block_of_the_readme_is_run():
    assert len(SNIPPETS) == README.read_text().count("```python")
    for _, _, code in SNIPPETS:
        assert re.search(r"^import |^from ", code, re.M), "a snippet imports what it uses"


def run_snippet(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -c code`` from ``cwd``, with the project as installed and no fault armed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_EXT_FAULT")}
    # The project as installed: the checkout's packages, found by the interpreter, not the cwd.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-c", code]
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(cmd, -9, str(exc.stdout or ""), f"{exc}")


@pytest.fixture(scope="module")
def snippet_runs(
    request: pytest.FixtureRequest, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, tuple[Path, subprocess.CompletedProcess[str]]]:
    """Every selected snippet run once, two at a time (each is its own process with its own
    Spark, topic and folder; measured idle with the six snippets before #28, 115 s one after
    the other, 83 s two at a time), by line. A snippet that times out fails its own test only."""
    assert kafka_bootstrap == "127.0.0.1:9092", "the snippets name the local broker"
    selected = {
        item.callspec.params["snippet"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_readme_snippet_runs_as_written"
    }
    root = tmp_path_factory.mktemp("readme")

    def run(
        snippet: tuple[str, int, str],
    ) -> tuple[int, tuple[Path, subprocess.CompletedProcess[str]]]:
        _, line, code = snippet
        cwd = root / f"line-{line}"
        return line, (cwd, run_snippet(code, cwd))

    # The harness's (three job runs) first: the other pool slot runs the rest meanwhile.
    order = sorted(selected, key=lambda s: ("harness.check" not in s[2], s[1]))
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, order))


@pytest.mark.integration
@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: f"README-line-{s[1]}")
def test_readme_snippet_runs_as_written(snippet, snippet_runs):
    _, line, code = snippet
    cwd, done = snippet_runs[line]
    assert done.returncode == 0, f"README line {line}:\n{done.stderr[-4000:]}"
    assert done.stdout.strip(), "a snippet shows its result"
    assert "DataFrame[" not in done.stdout, "it shows rows, not a DataFrame's repr"
    assert (cwd / "var" / "readme").is_dir(), "it wrote under the relative var/readme"
    if "harness.check" in code:  # each job run's batch lines, relayed as they came
        assert re.search(r"exactly_once_delta: \[\S+\] batch 0: \d+ rows", done.stderr)
