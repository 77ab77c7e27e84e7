"""Evaluation: agents on real envs (many episodes in parallel) and world-model fidelity.

* :mod:`textwm.eval.agents` — the agent under test: any OpenAI-compatible endpoint or a local
  checkpoint, behind one small protocol (conversations in, reply texts out).
* :mod:`textwm.eval.episodes` — the env-agnostic episode driver (lock-step rounds: one batched agent
  call, then one parallel env step for every live episode), episode records and summaries.
* :mod:`textwm.eval.fidelity` — WM fidelity after Word2World (arXiv 2512.18832): teacher-forced
  single-step scores through the one scorer, and Real / WM / W2R success rates with CR = W2R / Real.
* :mod:`textwm.eval.sciworld` — ScienceWorld: real-env worker fleet, simulated episodes, W2R replay,
  the ``sciworld/eval_sciworld.py`` pipeline.
"""
