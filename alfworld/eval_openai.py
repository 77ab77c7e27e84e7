"""The paper's ``eval_openai.py``: an OpenAI(-compatible) chat model on real ALFWorld games.

    OPENAI_API_KEY=... python alfworld/eval_openai.py MODEL ROWS.jsonl OUT.jsonl --max-turns 50 --concurrency 16

The agent is ``$OPENAI_BASE_URL`` (default https://api.openai.com/v1) with model MODEL, through Chat Completions
(the paper's client may have used the Responses API). Runs as ``alfworld/eval_parallel.py --agent URL
--agent-model MODEL --rows ROWS --episodes-file OUT.jsonl --paper-form openai``: the paper's rows (``won turns kill
messages raw_completions parsed_actions i task_type goal game_file``; ``messages`` null) in OUT.jsonl, summaries in
``OUT_eval/``. The mapping is ``textwm.eval.paper_forms.eval_openai_argv``.
"""

import sys

from textwm.eval.paper_forms import eval_openai_argv
from textwm.eval.parallel import main as eval_parallel

if __name__ == "__main__":
    raise SystemExit(eval_parallel(eval_openai_argv(sys.argv[1:], prog="alfworld/eval_openai.py"), env="alfworld",
                                   prog="alfworld/eval_openai.py"))
