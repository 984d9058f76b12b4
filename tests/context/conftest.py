"""Context end-to-end fixtures: a second fake OpenAI upstream that plays the summariser (the others, and
gateways built from policy YAML, come from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import ServerThread


@pytest.fixture
def summarizer_upstream() -> Iterator[tuple[FakeOpenAI, ServerThread]]:
    fake = FakeOpenAI()
    fake.reply = "The user and the assistant discussed topics one to many; facts were exchanged."
    with ServerThread(lambda: fake.app) as srv:
        yield fake, srv
