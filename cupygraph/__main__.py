"""``python -m cupygraph``: the same command line as the ``cupygraph`` script."""

from .cli import main

raise SystemExit(main())
