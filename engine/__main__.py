"""`python -m engine ...`: one engine replica as its own OpenAI-compatible server (`llm-gateway engine`)."""

import sys

from engine import main

sys.exit(main())
