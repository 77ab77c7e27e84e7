"""``python -m textwm.eval --env NAME {agent-real,agent-wm,fidelity,all} ...``: the closed-loop evaluation."""

from textwm.eval.run import main

raise SystemExit(main())
