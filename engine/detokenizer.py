"""Incremental detokenisation for streaming, with stop strings that may span token boundaries."""

from __future__ import annotations

from engine.tokenizer import Tokenizer

PROMPT_CONTEXT_TOKENS = 4  # decode with a little prompt context so a leading space survives (sentencepiece)


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas; holds back incomplete UTF-8 and stop-string prefixes."""

    def __init__(self, tokenizer: Tokenizer, prompt_ids: list[int], stop: list[str]) -> None:
        self.tokenizer = tokenizer
        self.ids = list(prompt_ids[-PROMPT_CONTEXT_TOKENS:])
        self.prefix_offset = 0
        self.read_offset = len(self.ids)
        self.stop = stop
        self.text = ""  # all output text so far (stop string removed once found)
        self.emitted = 0  # characters of `text` already handed out

    def add(self, token_id: int) -> bool:
        """Append one token; True when a stop string completed (text is then trimmed before it)."""
        self.ids.append(token_id)
        prefix = self.tokenizer.decode(self.ids[self.prefix_offset:self.read_offset])
        full = self.tokenizer.decode(self.ids[self.prefix_offset:])
        if full.endswith("\ufffd") or len(full) <= len(prefix):
            return False  # an incomplete UTF-8 sequence or a token with no text yet
        delta = full[len(prefix):]
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        search_from = max(0, len(self.text) - max((len(s) for s in self.stop), default=0) + 1)
        self.text += delta
        for stop in self.stop:
            at = self.text.find(stop, search_from)
            if at != -1:
                self.text = self.text[:at]
                return True
        return False

    def take(self, finished: bool) -> str:
        """Text not yet emitted; while running, keep back a tail that could still become a stop string."""
        end = len(self.text) if finished else len(self.text) - self._pending_stop_prefix()
        end = max(end, self.emitted)
        delta = self.text[self.emitted:end]
        self.emitted = end
        return delta

    def _pending_stop_prefix(self) -> int:
        longest = 0
        for stop in self.stop:
            for k in range(min(len(stop) - 1, len(self.text)), longest, -1):
                if self.text.endswith(stop[:k]):
                    longest = k
                    break
        return longest
