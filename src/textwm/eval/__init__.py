"""Evaluation over any registered env: agents in the real env and in the world model, W2R, WM fidelity.

* :mod:`textwm.eval.agents` — the agent under test: any OpenAI-compatible endpoint or a local
  checkpoint, behind one small protocol (conversations in, reply texts out).
* :mod:`textwm.eval.episodes` — the batched episode driver (lock-step rounds: one batched agent call,
  then one parallel env step for every live episode) over the shared turn rules, records, summaries.
* :mod:`textwm.eval.closed_loop` — the real-env, simulated and W2R backends and evaluations.
* :mod:`textwm.eval.fidelity` — WM fidelity after Word2World (arXiv 2512.18832): teacher-forced
  single-step scores through the one scorer, and Real / WM / W2R success rates with CR = W2R / Real.
* :mod:`textwm.eval.run` — the config, the run and the CLI (``python -m textwm.eval --env NAME ...``).
"""
