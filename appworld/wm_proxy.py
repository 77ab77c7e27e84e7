"""The WM proxy under the paper's name, run from appworld/: ``python wm_proxy.py &`` (:30000 -> :30001).

A thin entry point over :func:`textwm.serving.cli.paper_proxy_main` (the same flags as ``scripts/wm_proxy.py``;
``--help`` lists them). As the paper's ``appworld/wm_proxy.py`` does, it reads ``SGLANG_PORT`` as the WM
server's port (default 30001; when unset, ``WM_BACKEND_PORT`` as in ``scripts/wm_proxy.py``) and
``WM_PORT`` as its own port (default 30000).

One default differs from ``scripts/wm_proxy.py``: ``--repetition-penalty 1.3``, sent upstream when a request
carries none, as the paper's proxy fills it (its ``WMHandler.do_POST``). The paper's proxy also filled
``max_tokens`` 768 and 4 diffusion steps when a request had none; here every request of our WM client
carries ``max_tokens`` (``WM_MAX_TOKENS``) and the diffusion steps are the WM server's defaults. Flags given
on the command line win.
Hardware: CPU only (it forwards to the WM server). Runtime: until stopped.
"""

import sys

from textwm.serving.cli import paper_proxy_main

if __name__ == "__main__":
    raise SystemExit(paper_proxy_main(sys.argv[1:], prog="appworld/wm_proxy.py", sglang_port=True))
