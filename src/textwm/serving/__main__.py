"""``python -m textwm.serving {server,proxy,stack}``: the WM server, the WM proxy, the stack launcher."""

from textwm.serving.cli import main

raise SystemExit(main())
