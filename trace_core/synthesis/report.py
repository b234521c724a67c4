"""What one synthesis injected and why: the structured report the UI shows."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class InjectedExchange:
    index: int
    node_id: str
    thread_path: str
    timestamp: str
    vector: float  # best cosine of its messages to the query
    keyword: float  # best BM25 of its messages (0: no keyword match)
    branch: float  # best score of the topics above it
    fused: float
    status: str = ""  # "current" | "superseded" | ""
    pinned: bool = False  # a recalled past message (top_k_history) brought it in
    tokens: int = 0


@dataclass
class InjectedPath:
    node_id: str
    path: str
    summary: str
    similarity: float  # the topic's score: its summary's cosine to the query + 0.25 × its relative BM25 (0 unsummarised)
    keyword: float  # BM25 of its name and summary
    exchanges: int  # lines shown under it
    entries: tuple[int, ...] = ()  # the exchanges shown under it
    best_entry: float = 0.0  # the best cosine of those exchanges' messages to the query


@dataclass
class RetrievalReport:
    query: str
    paths: list[InjectedPath] = field(default_factory=list)
    exchanges: list[InjectedExchange] = field(default_factory=list)
    supersessions: list[tuple[int, int]] = field(default_factory=list)  # (older, newer) exchange indices
    memory_tokens: int = 0
    memory_token_budget: int = 0
    full_history_tokens: int = 0
    recent_tokens: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0  # of that, embedding the focused query (candidates.focused_query_vector)
    ranking: list[tuple[int, str]] = field(default_factory=list)  # every candidate message, best first

    @property
    def saved_ratio(self) -> float:
        return self.memory_tokens / self.full_history_tokens if self.full_history_tokens else 0.0
