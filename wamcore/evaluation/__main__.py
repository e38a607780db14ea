"""``python -m wamcore.evaluation``: an env process (started by the evaluation driver; see
``env_process``)."""

import sys

from .env_process import main

sys.exit(main())
