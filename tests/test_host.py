"""The minidtr command fixes glibc's malloc thresholds for its own process; the library
and a caller's process keep theirs (minidtr/host.py)."""

import subprocess
import sys

import pytest

from minidtr import cli, host


def test_steady_malloc_says_what_it_did():
    """In a process of its own (the test process keeps its allocator as it is)."""
    code = "from minidtr.host import steady_malloc; print(steady_malloc())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0
    said = out.stdout.strip()
    assert said.startswith("glibc mmap threshold 32 MiB") or said.startswith("malloc as is (")


@pytest.mark.parametrize(
    "environment, said",
    [
        ({"MINIDTR_DEFAULT_MALLOC": "1"}, "malloc as is (MINIDTR_DEFAULT_MALLOC=1)"),
        ({"MALLOC_MMAP_THRESHOLD_": "65536"}, "malloc as the environment sets it"),
        ({"MALLOC_TRIM_THRESHOLD_": "0"}, "malloc as the environment sets it"),
    ],
)
def test_the_environment_wins(monkeypatch, environment, said):
    for name in ("MINIDTR_DEFAULT_MALLOC", *host.ENVIRONMENT):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(host, "steady_malloc", lambda: pytest.fail("mallopt called"))
    assert host.tune_for_command() == said


def test_only_the_command_process_tunes(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(cli, "tune_for_command", lambda: calls.append(1))
    assert cli.main(["models"]) == 0  # a caller's process: as it is
    assert calls == []
    monkeypatch.setattr(sys, "argv", ["minidtr", "models"])
    assert cli.main() == 0  # the console script and python -m minidtr
    assert calls == [1]
