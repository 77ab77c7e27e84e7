"""WM proxy: the paper's world-model payload to an OpenAI-compatible server.

    python scripts/wm_proxy.py --port 30000 --upstream http://127.0.0.1:30001
"""

from textwm.serving.cli import proxy_main

if __name__ == "__main__":
    raise SystemExit(proxy_main(prog="scripts/wm_proxy.py"))
