"""The embedded default: the whole two-stage pipeline in miniature on a CPU (``scripts/demo.sh``; the same as
``textwm demo``; ``--help`` lists every flag)."""

from textwm.demo_cli import main

if __name__ == "__main__":
    raise SystemExit(main())
