"""The paper's ``appworld/create_sft_gpt_agent.py``: SFT demos from a GPT agent in the real AppWorld apps.

    export OPENAI_API_KEY=...
    python appworld/create_sft_gpt_agent.py      # data/appworld_sft_split.jsonl -> data/appworld_sft_gpt_agent.jsonl
    # other rows, or any OpenAI-compatible agent (then the GPT-only settings below are not sent)
    python appworld/create_sft_gpt_agent.py --rows runs/appworld_data/rl_train.jsonl --agent-url http://127.0.0.1:8000/v1

As the paper's: gpt-5.4 at temperature 0.3 with 512 completion tokens, 20 turns, and every demo kept
(``--keep success`` keeps the solved ones only). The apps run in our worker processes on their offline databases
(no env server on :30002 needed). Any flag of ``python -m textwm.eval.agent_sft`` may follow (``--help``); what
a demo row holds: :mod:`textwm.eval.agent_sft`.
"""

from pathlib import Path

from textwm.eval.agent_sft import PaperScript

SCRIPT = PaperScript(
    env="appworld", rows="data/appworld_sft_split.jsonl", out="data/appworld_sft_gpt_agent.jsonl", keep="all",
    max_turns=20, workers=4,
    openai_flags=("--agent-model", "gpt-5.4", "--temperature", "0.3", "--agent-max-tokens", "512",
                  "--token-limit-field", "max_completion_tokens"),
    rows_hint="use the paper's file, or rl_train.jsonl of python appworld/build_wm_dataset.py --out-dir DIR")

if __name__ == "__main__":
    raise SystemExit(SCRIPT.main(Path(__file__).resolve().parent, prog="appworld/create_sft_gpt_agent.py"))
