"""The `floorfirst` process ends without freeing its objects (cli/main.py `_exit_now`, as mypy's
`hard_exit`) once the command has exited, after what a normal exit does that anyone can see: the
atexit handlers run, stdout and stderr are flushed, the exit code is the command's. With another
thread running, or when main() is called with argv (the tests, one process calling it many times),
it exits as before."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import atexit, os, sys, threading, time
# run by the interpreter's normal exit (threading._shutdown, before the objects are freed), not by a fast one
threading._register_atexit(lambda: os.write(2, b"normal exit\\n"))
atexit.register(lambda: sys.stderr.write("atexit ran\\n"))
if "--thread" in sys.argv:
    sys.argv.remove("--thread")
    threading.Thread(target=time.sleep, args=(3,)).start()  # still running when the command ends
from cli.main import main
main()
"""


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_a_call_exits_fast_after_atexit_and_flush():
    run = _run("floor", "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["schema"].startswith("floorfirst.floor/")  # the whole document came out
    assert "atexit ran" in run.stderr
    assert "normal exit" not in run.stderr, "the normal exit ran: the fast exit was not taken"


@pytest.mark.parametrize("argv,rc", [(["floor", "--gpus", "0"], 2), (["--version"], 0), (["no-such-command"], 2)])
def test_the_exit_code_is_the_commands(argv, rc):
    run = _run(*argv)
    assert run.returncode == rc and "atexit ran" in run.stderr and "normal exit" not in run.stderr


def test_with_another_thread_running_the_exit_is_the_normal_one():
    """The check above can fail: with another thread still running the exit is the normal one."""
    run = _run("--thread", "floor", "--json")
    assert run.returncode == 0 and "normal exit" in run.stderr and "atexit ran" in run.stderr


def test_main_called_with_argv_raises_system_exit():
    import cli.main as m

    with pytest.raises(SystemExit) as exc:
        m.main(["--version"])
    assert exc.value.code == 0
