"""Incremental detokenisation for streaming, with stop strings that may span token boundaries."""

from __future__ import annotations

import orjson

from engine.tokenizer import Tokenizer

PROMPT_CONTEXT_TOKENS = 4  # decode with a little prompt context so a leading space survives (sentencepiece)


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas; holds back incomplete UTF-8 and stop-string prefixes."""

    def __init__(self, tokenizer: Tokenizer, prompt_ids: list[int], stop: list[str],
                 stop_repeated_items: bool = False) -> None:
        self.tokenizer = tokenizer
        self.ids = list(prompt_ids[-PROMPT_CONTEXT_TOKENS:])
        self.prefix_offset = 0
        self.read_offset = len(self.ids)
        self.stop = stop
        self.text = ""  # all output text so far (stop string removed once found)
        self.emitted = 0  # characters of `text` already handed out
        self.items = _ArrayItems() if stop_repeated_items else None

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
        if self.items is not None:
            end = self.items.feed(self.text)
            if end is not None:
                self.text = self.text[:end] + "]"  # the array as it stood before the repeated item
                return True
        return False

    def take(self, finished: bool) -> str:
        """Text not yet emitted; while running, keep back a tail that could still become a stop string."""
        end = len(self.text) if finished else len(self.text) - self._pending_stop_prefix()
        if self.items is not None and not finished:
            end = min(end, self.items.last_end)  # an item in progress may yet turn out a repeat, to be cut
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


class _ArrayItems:
    """Scans a JSON array as it is generated; reports when a whole top-level item equals an earlier one.

    The grammar guarantees well-formed JSON, so tracking string state and nesting depth is enough to find
    where each item ends; items are compared parsed (the same call written with other spacing is a repeat).
    """

    def __init__(self) -> None:
        self.pos = 0  # characters of the text scanned
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.item_start = -1
        self.last_end = -1  # end of the last whole item (where the array is closed on a repeat)
        self.seen: list[object] = []

    def feed(self, text: str) -> int | None:
        """Scan what was added; on a repeat, the end of the last item before it, else None."""
        for i in range(self.pos, len(text)):
            c = text[i]
            end = -1  # where an item at depth 1 ends, if one does at this character
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif c == "\\":
                    self.escaped = True
                elif c == '"':
                    self.in_string = False
                    end = i + 1 if self.depth == 1 else -1
            elif c == '"':
                self.in_string = True
                if self.depth == 1:
                    self.item_start = i
            elif c in "[{":
                if self.depth == 1:
                    self.item_start = i
                self.depth += 1
            elif c in "]}":
                self.depth -= 1
                end = i + 1 if self.depth == 1 else -1
            elif self.depth == 1 and c in " ,\n\t\r":
                end = i if self.item_start >= 0 else -1  # a number or literal ends at a separator
            elif self.depth == 1 and self.item_start < 0:
                self.item_start = i
            if end >= 0 and self.item_start >= 0:
                if self._repeats(text[self.item_start:end]):
                    self.pos = len(text)
                    return self.last_end
                self.last_end, self.item_start = end, -1
        self.pos = len(text)
        return None

    def _repeats(self, item_text: str) -> bool:
        try:
            item = orjson.loads(item_text)
        except orjson.JSONDecodeError:
            item = item_text
        if item in self.seen:
            return True
        self.seen.append(item)
        return False
