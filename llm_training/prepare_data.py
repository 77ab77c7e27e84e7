"""Write train/test JSONL for ms-swift SFT from a Hugging Face dataset, a local file or a local folder.

Rows are ``{"messages": [...], ...extra fields}``. Works offline on local data; a hub id that
cannot be reached fails with a clear message.
Tiny CPU run:
    python llm_training/prepare_data.py --source data/samples/sciworld_wm_train.jsonl --test-size 0.1 \
        --out-dir /tmp/ar_data
Hub:
    HF_TOKEN=... python llm_training/prepare_data.py --source my-org/my-wm-data \
        --train-configs default --test-configs default --out-dir ./data
"""

from textwm.data.cli import hub_main

if __name__ == "__main__":
    raise SystemExit(hub_main(prog="llm_training/prepare_data.py", description=__doc__))
