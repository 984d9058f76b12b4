"""Run the test suite's fake OpenAI upstream as its own process: `python bench/serve_fake.py PORT [DELAY_S]`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import web  # noqa: E402

from tests.fakes.openai_server import FakeOpenAI  # noqa: E402

if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    fake = FakeOpenAI()
    fake.record = False
    if len(sys.argv) > 2:
        fake.delay_headers = float(sys.argv[2])
    web.run_app(fake.app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
