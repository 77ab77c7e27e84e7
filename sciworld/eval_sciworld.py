"""Evaluate an agent on ScienceWorld (real env and world model) and the world model's fidelity.

    # the agent in the real env (an OpenAI-compatible endpoint, or --agent-path <checkpoint>)
    python sciworld/eval_sciworld.py agent-real --rows runs/sciworld_data/rl_test.jsonl \
        --agent-url http://127.0.0.1:8000/v1 --workers 8 --output-dir runs/eval_sw/real
    # Real / WM / W2R / CR for one agent, plus single-step fidelity of the WM
    python sciworld/eval_sciworld.py all --rows runs/sciworld_data/rl_test.jsonl --agent-url http://127.0.0.1:8000/v1 \
        --wm-endpoint http://127.0.0.1:30000/ --wm-transitions runs/sciworld_data/wm_test.jsonl \
        --wm-url http://127.0.0.1:30001/v1 --workers 8 --output-dir runs/eval_sw/all
    # tiny CPU run (~1.5 min; data, tiny models and a WM stack on :31000 as in sciworld/README.md "Evaluation")
    python sciworld/eval_sciworld.py all --rows /tmp/sw/rl_test.jsonl --agent-path /tmp/tiny_ar --temperature 1 \
        --max-turns 3 --agent-max-tokens 12 --wm-endpoint http://127.0.0.1:31000/ \
        --wm-transitions /tmp/sw/wm_test.jsonl --wm-path /tmp/tiny_sdar --num-gpus 0 --wm-max-tokens 16 \
        --single-step-limit 20 --output-dir /tmp/eval_sw

    # the paper's form: CKPT ROWS LABEL GPU -> agent-real --agent-path CKPT --rows ROWS --device cuda:GPU
    #   --output-dir data/eval_LABEL (any of our flags may follow); also writes the paper's data/eval_LABEL.json
    python sciworld/eval_sciworld.py CKPT ROWS.jsonl my_label 0

Modes: agent-real, agent-wm, fidelity (single-step only), all. The same as ``python -m textwm.eval --env
sciworld ...``; outputs and definitions: sciworld/README.md. The paper's form: ``textwm.eval.paper_forms``.
"""

import sys

from textwm.eval.paper_forms import is_sciworld_paper_form, sciworld_argv, write_sciworld_paper_json

PAPER_FORM_NOTE = ("The paper's form works too: eval_sciworld.py CKPT ROWS LABEL GPU [flags] = agent-real "
                   "--agent-path CKPT --rows ROWS --device cuda:GPU --output-dir data/eval_LABEL [flags].\n")


def main(argv: list[str]) -> int:
    from textwm.eval.run import main as eval_main

    if argv[:1] in (["-h"], ["--help"]):
        print(PAPER_FORM_NOTE)
    try:
        flags = sciworld_argv(argv)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    code = eval_main(flags, prog="sciworld/eval_sciworld.py", env="sciworld")
    if code == 0 and is_sciworld_paper_form(argv):
        write_sciworld_paper_json(argv)  # the paper's data/eval_LABEL.json, beside our data/eval_LABEL/
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
