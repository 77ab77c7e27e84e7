"""``python -m textwm``: the ``textwm`` command (:mod:`textwm.cli`)."""

from textwm.cli import main

raise SystemExit(main())
