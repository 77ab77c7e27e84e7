"""Supervised fine-tuning of a WeDLM world model (objective `wedlm`; the project's one trainer).

The checkpoint keeps its causal architecture; an AR Qwen3/Qwen2 checkpoint is marked as WeDLM on
load (a mask token and the WeDLM config fields are added). Launch with torchrun for several GPUs:
    python scripts/make_tiny_model.py --family wedlm --block-size 8 --out runs/tiny_wedlm
    python wedlm/train.py --config wedlm/configs/tiny_cpu.yaml                     # tiny CPU run (~1 min)
    torchrun --nproc_per_node 8 wedlm/train.py --config wedlm/configs/sft_example.yaml
    python wedlm/train.py --list-keys                                              # every config key
"""

from textwm.training.cli import main

if __name__ == "__main__":
    raise SystemExit(main(prog="wedlm/train.py", description=__doc__))
