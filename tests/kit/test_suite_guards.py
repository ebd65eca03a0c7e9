"""The kit's own suite fails in bounded time: a hanging kit test is failed by pytest-timeout with
its stack (tests/kit/conftest.py gives every test a timeout), not left to CI's 90 minutes."""

import os
import subprocess
import sys

from tests.kit.harness import KIT_ROOT

HANGS = '''
import time


def test_that_hangs():
    time.sleep(120)
'''


def test_a_hanging_kit_test_fails_with_its_stack_within_its_timeout(tmp_path):
    (tmp_path / "test_hangs.py").write_text(HANGS)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.kit.conftest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path / "test_hangs.py")], cwd=KIT_ROOT, capture_output=True, text=True,
                          timeout=100, env=dict(os.environ, KIT_TEST_TIMEOUT="3", PYTHONPATH=KIT_ROOT))
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert "time.sleep(120)" in output, output[-3000:]  # the hanging line, in the stack it is failed with
