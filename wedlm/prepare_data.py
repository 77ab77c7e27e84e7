"""Convert chat JSONL into WeDLM SFT data: one JSON array of messages per line.

Only the last message of each array is trained. Rows that are already arrays: ``--passthrough``.
Tiny CPU run:
    python wedlm/prepare_data.py --input data/samples/sciworld_wm_train.jsonl --output /tmp/wedlm_train.jsonl
"""

from textwm.data.cli import ArrayConvertConfig, convert_main

if __name__ == "__main__":
    raise SystemExit(convert_main(config_cls=ArrayConvertConfig, prog="wedlm/prepare_data.py",
                                  description=__doc__))
