"""Start/stop the WM stack (server + proxy) with pid files and logs.

    python scripts/wm_stack.py start --backend native --model-path runs/tiny_sdar
    python scripts/wm_stack.py print-command --backend lmdeploy --model-path models/SDAR-8B-Chat --tp 2
    python scripts/wm_stack.py stop
"""

from textwm.serving.cli import stack_main

if __name__ == "__main__":
    raise SystemExit(stack_main(prog="scripts/wm_stack.py"))
