"""AR vs SDAR vs WeDLM world models at equal size, rows and steps (the same as ``textwm compare``).

    python scripts/wm_comparison.py --smoke --out runs/wm_comparison_smoke           # CPU, a few minutes
    python scripts/wm_comparison.py --data-dir runs/sciworld_data --out runs/wm_comparison   # one GPU

``--help`` lists every flag; :mod:`textwm.experiments.comparison_cli` has more examples.
"""

import sys

from textwm.experiments.comparison_cli import main

if __name__ == "__main__":
    sys.exit(main())
