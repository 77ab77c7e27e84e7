"""The paper's ``eval_fast.py``: local checkpoints on real ALFWorld games, greedy, one after another.

    python alfworld/eval_fast.py CKPT [CKPT2 ...] --dataset ROWS.jsonl --gpus 0 --max-turns 35 [--parallel 32] \
        [--out-dir data]

Each checkpoint runs as ``alfworld/eval_parallel.py CKPT ROWS DIR/eval_<basename>.jsonl GPU --max-turns T
--parallel P``: the paper's rows (``i won turns kill task_type game_file``) in
``DIR/eval_<basename>.jsonl``, summaries in ``DIR/eval_<basename>_eval/``.
One GPU (our local agent, not vLLM tensor parallel); the mapping is ``textwm.eval.paper_forms.eval_fast_argvs``.
"""

import sys

from textwm.eval.paper_forms import eval_fast_argvs
from textwm.eval.parallel import main as eval_parallel


def main(argv: list[str]) -> int:
    try:
        runs = eval_fast_argvs(argv, prog="alfworld/eval_fast.py")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for run in runs:
        code = eval_parallel(run, env="alfworld", prog="alfworld/eval_fast.py")
        if code != 0:
            return code
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
