"""The WM proxy under the paper's name, run from alfworld/: ``python wm_proxy.py &`` (:30000 -> :30001).

A thin entry point over :func:`textwm.serving.cli.paper_proxy_main` (the same flags as ``scripts/wm_proxy.py``;
``--help`` lists them). ``WM_PORT`` (default 30000) and ``WM_BACKEND_PORT`` (default 30001) set the ports,
as in the paper's ``alfworld/wm_proxy.py``.

One default differs from ``scripts/wm_proxy.py``: ``--repetition-penalty 1.3``, sent upstream when a request
carries none. The paper's ALFWorld proxy fills ``repetition_penalty`` with 1.3 in the same case (its
``WMHandler.do_POST``). A ``--repetition-penalty`` given on the command line wins.
Hardware: CPU only (it forwards to the WM server). Runtime: until stopped.
"""

import sys

from textwm.serving.cli import paper_proxy_main

if __name__ == "__main__":
    raise SystemExit(paper_proxy_main(sys.argv[1:], prog="alfworld/wm_proxy.py", sglang_port=False))
