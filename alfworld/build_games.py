"""Build real ALFWorld games offline (``alfworld-download`` is not needed).

    python alfworld/build_games.py --out-dir runs/alfworld_games --num-games 300 --seed 0   # ~15 min, 2 workers
    python alfworld/build_games.py --out-dir runs/alfworld_rebuilt --from-rows ../shared/data/alfworld_rl.jsonl

Generated games cover the six task types, split by floor plan into train / eval_in_distribution /
eval_out_of_distribution (unseen rooms stay unseen); each is kept when ALFWorld's handcoded expert wins it.
``--from-rows`` rebuilds the game of every paper-format row (first observation and admissible commands
as the row's). Tiny CPU run: ``--num-games 6 --eval-fraction 0`` (~30 s).
"""

from textwm.envs.alfworld.gamebank import main

if __name__ == "__main__":
    raise SystemExit(main())
