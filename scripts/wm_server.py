"""OpenAI-compatible world-model server (AR or SDAR checkpoint), batched.

    python scripts/wm_server.py --model-path runs/tiny_sdar --port 30001 --temperature 0
"""

from textwm.serving.cli import server_main

if __name__ == "__main__":
    raise SystemExit(server_main(prog="scripts/wm_server.py"))
