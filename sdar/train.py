"""Supervised fine-tuning of a world model, objective `ar`, `sdar` or `wedlm` (one trainer, HF Trainer based).

Launch with torchrun through sdar/train_sft.sh, or directly:
    python sdar/train.py --config sdar/configs/tiny_cpu.yaml            # tiny CPU run (~1 min)
    python sdar/train.py --config sdar/configs/sft_example.yaml max_steps=100 objective=ar
    python sdar/train.py --list-keys                                    # every config key
"""

from textwm.training.cli import main

if __name__ == "__main__":
    raise SystemExit(main(prog="sdar/train.py", description=__doc__))
