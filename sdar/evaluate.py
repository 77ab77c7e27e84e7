"""Score SDAR predictions written by `sdar/eval_generate.py` (the project's one scorer).

Tiny CPU run (bundled sample predictions):
    python sdar/evaluate.py --input-dir data/samples/predictions --datasets copy_state --output-dir /tmp/scores
The paper's command lines work as they are (its flags, its file names); its ROUGE-L library:
    python sdar/evaluate.py --input-dir outputs/eval --datasets test --output-dir outputs/eval --rouge-impl pltrdy
Side by side:
    python sdar/evaluate.py --compare ar=runs/ar_scores sdar=runs/sdar_scores --output-dir runs/compare
"""

from textwm.metrics.cli import main

if __name__ == "__main__":
    raise SystemExit(main(prog="sdar/evaluate.py"))
