"""Fix the tool names and schemas of a paper-format AppWorld file from the installed apps' own API specs.

    python appworld/fix_tool_names_and_schemas.py ../shared/data/appworld_sft_gpt_agent.jsonl --output runs/sft_fixed.jsonl
    python appworld/fix_tool_names_and_schemas.py rows.jsonl --in-place

Old names of the paper's early data are renamed (``venmo__send_payment`` -> ``venmo__create_transaction``), the
parameters of its calls too, and every tool list is rebuilt from the apps' real parameters
(``textwm.envs.appworld.fix_tools``). Prints a JSON summary; ``--help`` lists the flags.
"""

from textwm.envs.appworld.fix_tools import main

if __name__ == "__main__":
    raise SystemExit(main())
