"""Convert chat JSONL into SDAR training data (LlamaFactory sharegpt rows + dataset_info.json).

Tiny CPU run:
    python sdar/prepare_data.py --input data/samples/sciworld_wm_train.jsonl --output /tmp/sdar_data/train.jsonl
Then point a LlamaFactory-style config at it with ``dataset_dir: /tmp/sdar_data`` and
``dataset: train`` (``--format array`` writes the bare message arrays of the paper's scripts).
"""

from textwm.data.cli import convert_main

if __name__ == "__main__":
    raise SystemExit(convert_main(prog="sdar/prepare_data.py", description=__doc__))
