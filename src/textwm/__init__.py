"""textwm: text world models for agent RL.

Stage 1 trains and scores world models (AR, SDAR block diffusion, WeDLM) on chat-format
environment transitions; stage 2 trains agents with GRPO inside those world models.
The package root imports nothing heavy: torch, transformers and the env packages are
imported by the submodules that need them.

Every command of the package ends on Ctrl-C with one line and exit status 130, not a traceback: importing the
package wraps the interpreter's default ``sys.excepthook`` (and only the default one) for ``KeyboardInterrupt``
alone; other exceptions are shown as before.
"""

import sys

__version__ = "0.1.0"


def _interrupted_in_one_line(kind, value, traceback):
    if issubclass(kind, KeyboardInterrupt):
        print("interrupted", file=sys.stderr)       # the interpreter then exits by SIGINT: status 130
        return
    sys.__excepthook__(kind, value, traceback)


if sys.excepthook is sys.__excepthook__:
    sys.excepthook = _interrupted_in_one_line
