"""Ctrl-C ends a command of the package with one line and status 130, not a traceback."""

import signal
import subprocess
import sys
import time


def test_sigint_ends_a_command_with_one_line_and_130(tmp_path):
    # A command started in the background inherits SIGINT ignored (the shell's rule for asynchronous commands):
    # the child takes Python's own handler back, as a command run from a terminal has it.
    child = ("import signal, textwm, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "print('ready', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode in (130, -signal.SIGINT) and err.strip() == "interrupted" and "Traceback" not in err
