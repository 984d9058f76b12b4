"""Token-budget assembly: fit system prompt, conversation, documents and query into the window.

Priority: the system prompt and the query (the final user turn and what follows it) are what the client sent
and are never removed or shortened: when they cannot fit, the client gets a 400 `context_length_exceeded`
with the numbers. (The system prompt is pruned by line priority only where the route asks for it with
`compression.system.max_share`, and never to nothing.) Then the newest `keep_recent` history turns; then
documents by score; then older turns (verbatim when they fit, else summarised, else the oldest dropped). The
strategy reserves the output and splits the flexible rest between documents and history; a part that needs
less than its share leaves the rest to the other.

A window of None means the model's window is not known: nothing is dropped, summarised or cut (there is no
limit to fit), and the budget header says `window=unknown`.

The work is split around the one slow step, the summariser call: `plan()` (sync) decides what must be
summarised, the caller awaits the summary, `finish()` (sync) builds the forwarded messages and checks the
exact count of the result against the limit, shrinking until it fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.context.compress import Document, dedupe, prune_system, truncate_to_tokens
from gateway.context.config import ContextConfig
from gateway.context.ordering import document_messages
from gateway.context.tokens import RequestCounter, TokenCounter
from gateway.errors import GatewayError

UNBOUNDED = 1 << 62  # the prompt limit when the window is not known: no destructive step is ever needed
SUMMARY_PREFIX = "Summary of the {n} earlier messages of this conversation (written by the gateway to save tokens):\n"
MIN_SUMMARY_TOKENS = 16
MIN_DOC_PIECE = 8  # fewer tokens than this left for a truncated document: leave it out


@dataclass(slots=True)
class Conversation:
    system: list[dict]  # the leading system / developer messages
    units: list[list[dict]]  # history, oldest first; an assistant tool call and its tool results are one unit
    query: list[dict]  # the last user message and everything after it


def split_conversation(messages: list[dict]) -> Conversation:
    i = 0
    while i < len(messages) and messages[i].get("role") in ("system", "developer"):
        i += 1
    rest = messages[i:]
    units: list[list[dict]] = []
    for message in rest:
        if message.get("role") == "tool" and units:
            units[-1].append(message)
        else:
            units.append([message])
    q = len(units) - 1
    while q > 0 and units[q][0].get("role") != "user":
        q -= 1
    query = [m for unit in units[max(q, 0) :] for m in unit]
    return Conversation(messages[:i], units[: max(q, 0)], query)


@dataclass(slots=True)
class BudgetReport:
    window: int | None  # None: the model's window is not known
    reserved_output: int | None  # None: no limit was set (the backend's default applies)
    tokenizer: str
    exact: bool
    system: int = 0
    tools: int = 0
    documents: int = 0
    history: int = 0
    summary: int = 0
    query: int = 0
    total: int = 0  # prompt tokens of the forwarded request
    original: int = 0  # prompt tokens of the request as the client sent it (every document included)
    documents_kept: int = 0
    documents_truncated: int = 0
    documents_duplicate: int = 0
    documents_dropped: int = 0
    messages_summarized: int = 0
    messages_dropped: int = 0
    summary_result: str = "none"  # none | hit | extended | miss | error | timeout | no_room
    input_price_per_mtok: float = 0.0  # USD, from the policy or the model table

    @property
    def saved(self) -> int:
        return max(0, self.original - self.total)

    @property
    def saved_usd(self) -> float:
        return self.saved * self.input_price_per_mtok / 1e6

    def header(self) -> str:
        parts = [
            f"window={'unknown' if self.window is None else self.window}",
            f"output={'default' if self.reserved_output is None else self.reserved_output}",
            f"system={self.system}",
            f"tools={self.tools}",
            f"documents={self.documents}",
            f"history={self.history}",
            f"summary={self.summary}",
            f"query={self.query}",
            f"total={self.total}",
            f"saved={self.saved}",
            f"saved_usd={self.saved_usd:.6f}",
            f"tokenizer={self.tokenizer}",
        ]
        if not self.exact:
            parts.append("estimate")
        return "; ".join(parts)


@dataclass(slots=True, kw_only=True)
class Plan:
    counter: RequestCounter
    config: ContextConfig
    limit: int  # prompt tokens allowed: window minus the reserved output
    system: list[dict]
    query: list[dict]
    tools: list | None
    tools_tokens: int
    recent: list[list[dict]]
    older: list[list[dict]]
    docs: list[Document]  # deduplicated, best first
    docs_alloc: int
    older_budget: int
    older_tokens: int
    summary_max_tokens: int  # > 0 when the older turns must be summarised
    ordered: bool
    report: BudgetReport
    original_messages: list[dict] = field(default_factory=list)


@dataclass(slots=True)
class Assembled:
    messages: list[dict]
    tools: list | None
    report: BudgetReport
    boundaries: list[tuple[int, int]]  # (last index of a stable section, prompt tokens through it)


def _unit_tokens(counter: RequestCounter, unit: list[dict]) -> int:
    return counter.count_unit(unit)


def _messages_tokens(counter: RequestCounter, messages: list[dict]) -> int:
    return sum(counter.count_message(m) for m in messages)


def context_length_error(report: BudgetReport, needed: int, limit: int) -> GatewayError:
    return GatewayError(
        400,
        f"This model's maximum context length is {report.window} tokens and {report.reserved_output or 0} are "
        f"reserved for the output, leaving {limit} for the prompt; the system prompt ({report.system} tokens), "
        f"tools ({report.tools}) and the query ({report.query}) alone need {needed} tokens. Shorten them or "
        f"lower max_tokens.",
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    )


def plan(
    token_counter: TokenCounter,
    config: ContextConfig,
    window: int | None,
    reserved_output: int | None,
    conversation: Conversation,
    documents: list[Document],
    tools: list | None,
    original_messages: list[dict],
) -> Plan:
    """Decide each part's share; raises context_length_exceeded when system + query cannot fit."""
    counter = RequestCounter(token_counter)
    report = BudgetReport(window, reserved_output, counter.name, counter.exact)
    limit = UNBOUNDED if window is None else window - (reserved_output or 0)
    tools_tokens = counter.count_tools(tools)
    report.tools = tools_tokens
    report.query = _messages_tokens(counter, conversation.query)
    system = _pruned_system(counter, config, conversation.system, limit - tools_tokens - report.query)
    report.system = _messages_tokens(counter, system)
    fixed = report.system + report.query + tools_tokens + counter.priming(system + conversation.query)
    if fixed > limit:
        raise context_length_error(report, fixed, limit)
    flexible = limit - fixed

    # Newest turns first, while they fit; a turn that does not fit ends the run (and is dropped).
    keep = config.conversation.keep_recent
    older = conversation.units[: max(0, len(conversation.units) - keep)]
    recent_candidates = conversation.units[len(older) :]
    recent, recent_tokens = _newest_that_fit(counter, recent_candidates, flexible)
    dropped_recent = recent_candidates[: len(recent_candidates) - len(recent)]
    report.messages_dropped += sum(len(u) for u in dropped_recent)
    if dropped_recent:  # the run broke: older turns would sit before a gap, so they go too
        report.messages_dropped += sum(len(u) for u in older)
        older = []

    docs, duplicates = (
        dedupe(documents, config.documents.near_duplicate)
        if config.documents.dedup
        else (sorted(documents, key=lambda d: -d.score), [])
    )
    report.documents_duplicate = len(duplicates)
    ordered = config.ordering.enabled
    docs_need = _documents_need(counter, docs, ordered)
    older_tokens = sum(_unit_tokens(counter, u) for u in older)
    rest = flexible - recent_tokens
    docs_target = int(config.budget.split.documents * flexible)
    docs_alloc = min(docs_need, max(min(docs_target, rest), rest - older_tokens))
    if config.documents.max_tokens is not None:
        docs_alloc = min(docs_alloc, config.documents.max_tokens)
    older_budget = rest - docs_alloc

    summary_max = 0
    if older and older_tokens > older_budget and config.conversation.summarizer:
        overhead = counter.count_message({"role": "system", "content": SUMMARY_PREFIX.format(n=0)})
        summary_max = min(config.conversation.max_summary_tokens, older_budget - overhead)
        if summary_max < MIN_SUMMARY_TOKENS:
            summary_max = 0
            report.summary_result = "no_room"
    # What the client sent counts every document, the duplicates dedup dropped too: they are tokens saved.
    report.original = counter.count_prompt(original_messages, tools) + (
        _documents_need(counter, docs + duplicates, ordered) if duplicates else docs_need)
    return Plan(
        counter=counter, config=config, limit=limit, system=system, query=conversation.query, tools=tools,
        tools_tokens=tools_tokens, recent=recent, older=older, docs=docs, docs_alloc=docs_alloc,
        older_budget=older_budget, older_tokens=older_tokens, summary_max_tokens=summary_max, ordered=ordered,
        report=report, original_messages=original_messages,
    )


def _pruned_system(counter: RequestCounter, config: ContextConfig, system: list[dict], room: int) -> list[dict]:
    """Prune the system prompt by line priority only when the route asks for it (`system.max_share`) and it
    alone exceeds that share of the input. A message is never pruned to nothing: it then stays whole (and the
    fit check answers 400 if it cannot fit), since an empty system prompt is a dropped one."""
    max_share = config.system.max_share
    if max_share is None or not system:
        return system
    share = int(max_share * max(room, 0))
    total = _messages_tokens(counter, system)
    if total <= share:
        return system
    out = []
    for message in system:
        content = message.get("content")
        if isinstance(content, str):  # each message gets its proportional part of the share
            part = share * counter.count_message(message) // total
            budget = max(0, part - counter.tokens_per_message - counter.count_text(str(message.get("role", ""))))
            pruned = prune_system(content, budget, counter.count_text)
            if pruned.strip():
                message = {**message, "content": pruned}
        out.append(message)
    return out


def _group(doc: Document, ordered: bool) -> str:
    return ("static" if doc.static else "retrieved") if ordered else "all"


def _group_overhead(counter: RequestCounter, group: str) -> int:
    """Tokens of a documents message with no documents in it (framing, heading, tags)."""
    probe = [Document("", "", 0.0, group == "static")]
    head, tail = document_messages(probe, group != "all")
    message = head if head is not None else tail
    assert message is not None
    return counter.count_message(message) - counter.count_text('<document id="">\n\n</document>')


def _doc_tokens(counter: RequestCounter, doc: Document) -> int:
    """A document's share of its message: its tags and content plus the blank line between documents."""
    return counter.count_text(f'<document id="{doc.id}">\n{doc.content}\n</document>') + 1


def _documents_need(counter: RequestCounter, docs: list[Document], ordered: bool) -> int:
    groups = {_group(d, ordered) for d in docs}
    return sum(_group_overhead(counter, g) for g in groups) + sum(_doc_tokens(counter, d) for d in docs)


def _fill_documents(plan: Plan, budget: int) -> tuple[list[Document], int]:
    """Documents in score order within `budget` tokens (messages, framing included); the first one that does
    not fit whole is cut at a sentence boundary and ends the fill. Returns (chosen, truncated count).

    Costs are added per document (cheap, memoised); `finish` checks the exact count of the result."""
    counter = plan.counter
    chosen: list[Document] = []
    used = 0
    groups: set[str] = set()
    for doc in plan.docs:
        group = _group(doc, plan.ordered)
        opening = 0 if group in groups else _group_overhead(counter, group)
        cost = opening + _doc_tokens(counter, doc)
        if used + cost <= budget:
            chosen.append(doc)
            used += cost
            groups.add(group)
            continue
        empty = Document(doc.id, "", doc.score, doc.static)
        room = budget - used - opening - _doc_tokens(counter, empty)
        if room >= MIN_DOC_PIECE:
            text = truncate_to_tokens(doc.content, room, counter.count_text)
            if text:
                chosen.append(Document(doc.id, text, doc.score, doc.static))
                return chosen, 1
        break
    return chosen, 0


def _summary_message(n_messages: int, text: str) -> dict:
    return {"role": "system", "content": SUMMARY_PREFIX.format(n=n_messages) + text.strip()}


def _fit_summary(plan: Plan, text: str) -> dict | None:
    n = sum(len(u) for u in plan.older)
    message = _summary_message(n, text)
    if plan.counter.count_message(message) <= plan.older_budget:
        return message
    overhead = plan.counter.count_message(_summary_message(n, ""))
    cut = truncate_to_tokens(text, plan.older_budget - overhead, plan.counter.count_text)
    return _summary_message(n, cut) if cut else None


def finish(plan: Plan, summary_text: str | None) -> Assembled:
    """Build the forwarded messages; the exact count of the result never exceeds the limit."""
    counter, report = plan.counter, plan.report
    summary: dict | None = None
    older: list[list[dict]] = plan.older
    if plan.older and plan.older_tokens > plan.older_budget:
        summary = _fit_summary(plan, summary_text) if summary_text else None
        if summary is not None:
            report.messages_summarized = sum(len(u) for u in plan.older)
            older = []
        else:
            older, _ = _newest_that_fit(counter, plan.older, plan.older_budget)
            report.messages_dropped += sum(len(u) for u in plan.older[: len(plan.older) - len(older)])
    recent = plan.recent
    older_used = sum(_unit_tokens(counter, u) for u in older) + (counter.count_message(summary) if summary else 0)
    docs_budget = plan.docs_alloc + max(0, plan.older_budget - older_used)
    if plan.config.documents.max_tokens is not None:
        docs_budget = min(docs_budget, plan.config.documents.max_tokens)

    while True:
        chosen, truncated = _fill_documents(plan, docs_budget)
        messages, boundaries = _layout(plan, chosen, summary, older, recent)
        total = counter.count_prompt(messages, plan.tools)
        if total <= plan.limit:
            break
        # Counts are additive for tiktoken, so this runs only for template-based counters: shrink and retry.
        excess = total - plan.limit
        if chosen:
            docs_budget = max(0, min(docs_budget, _documents_need(counter, chosen, plan.ordered)) - excess)
        elif older:
            report.messages_dropped += len(older[0])
            older = older[1:]
        elif summary is not None:
            report.messages_summarized = 0
            report.messages_dropped += sum(len(u) for u in plan.older)
            summary = None
        elif recent:
            report.messages_dropped += len(recent[0])
            recent = recent[1:]
        else:
            raise context_length_error(report, total, plan.limit)

    report.documents_kept = len(chosen)
    report.documents_truncated = truncated
    report.documents_dropped = len(plan.docs) - len(chosen)
    head, tail = document_messages(chosen, plan.ordered)
    report.documents = sum(counter.count_message(m) for m in (head, tail) if m is not None)
    report.summary = counter.count_message(summary) if summary else 0
    report.history = sum(_unit_tokens(counter, u) for u in older + recent) + report.summary
    report.total = total
    return Assembled(messages, plan.tools, report, boundaries)


def _newest_that_fit(
    counter: RequestCounter, units: list[list[dict]], budget: int
) -> tuple[list[list[dict]], int]:
    """The newest units that fit `budget`, stopping at the first that does not; and the tokens they use."""
    kept: list[list[dict]] = []
    used = 0
    for unit in reversed(units):
        cost = _unit_tokens(counter, unit)
        if used + cost > budget:
            break
        kept.insert(0, unit)
        used += cost
    return kept, used


def _layout(
    plan: Plan, docs: list[Document], summary: dict | None, older: list[list[dict]], recent: list[list[dict]]
) -> tuple[list[dict], list[tuple[int, int]]]:
    """Messages in cache-friendly order, and the stable-prefix boundaries for provider cache breakpoints."""
    counter = plan.counter
    head, tail = document_messages(docs, plan.ordered)
    messages: list[dict] = list(plan.system)
    if head is not None:
        messages.append(head)
    static_end = len(messages) - 1
    if summary is not None:
        messages.append(summary)
    for unit in older + recent:
        messages.extend(unit)
    history_end = len(messages) - 1
    if tail is not None:
        messages.append(tail)
    messages.extend(plan.query)
    boundaries: list[tuple[int, int]] = []
    if plan.ordered:
        ends = [static_end, history_end if history_end != static_end else -1]
        # An agent loop: tool rounds after the last user message grow every step; the newest tool result is the
        # newest point the next step will repeat, so it is worth a breakpoint too.
        if len(plan.query) > 1 and plan.query[-1].get("role") == "tool":
            ends.append(len(messages) - 1)
        running, counted = plan.tools_tokens, 0
        for end in ends:
            if end < 0:
                continue
            running += sum(counter.count_message(m) for m in messages[counted : end + 1])
            counted = end + 1
            boundaries.append((end, running))
    return messages, boundaries
