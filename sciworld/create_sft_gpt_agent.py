"""The paper's ``sciworld/create_sft_gpt_agent.py``: SFT demos from a GPT agent in the real ScienceWorld.

    export OPENAI_API_KEY=...
    python sciworld/create_sft_gpt_agent.py      # data/sciworld_rl_split.jsonl -> data/sciworld_sft_gpt_{all,perfect}.jsonl
    # any OpenAI-compatible agent instead (then the GPT-only settings below are not sent)
    python sciworld/create_sft_gpt_agent.py --agent-url http://127.0.0.1:8000/v1

As the paper's: gpt-5.5 with ``reasoning_effort: none`` and 128 completion tokens, 50 turns, 8 episodes in
flight; every episode goes to ``sciworld_sft_gpt_all.jsonl``, the ones scoring 100 to
``sciworld_sft_gpt_perfect.jsonl``. The real env runs in our worker processes (no env server on :30003 needed);
the rows' own agent prompt is the demo's system prompt. Any flag of ``python -m textwm.eval.agent_sft`` may
follow (``--help``); what a demo row holds: :mod:`textwm.eval.agent_sft`.
"""

from pathlib import Path

from textwm.eval.agent_sft import PaperScript

SCRIPT = PaperScript(
    env="sciworld", rows="data/sciworld_rl_split.jsonl", out="data/sciworld_sft_gpt_perfect.jsonl",
    all_out="data/sciworld_sft_gpt_all.jsonl", keep="success", max_turns=50, workers=8,
    openai_flags=("--agent-model", "gpt-5.5", "--temperature", "1", "--agent-max-tokens", "128",
                  "--token-limit-field", "max_completion_tokens", "--agent-extra-body", '{"reasoning_effort": "none"}'),
    rows_hint="make it with python sciworld/data/create_sciworld_splits.py")

if __name__ == "__main__":
    raise SystemExit(SCRIPT.main(Path(__file__).resolve().parent, prog="sciworld/create_sft_gpt_agent.py"))
