"""TRACE: a context-tree memory engine for LLM chat.

``from trace_core import CTree, VectorDatabase, PromptSynthesizer`` — the names of
the TRACE README. Nothing heavy is imported here: torch and sentence-transformers
load when an embedder is first used.
"""

import logging as _logging
from typing import TYPE_CHECKING as _TYPE_CHECKING

from .errors import SessionDamagedError
from .nodes import MessageNode, TopicNode
from .store import (
    ConversationVector,
    EmbedderMismatchError,
    ReadOnlySessionError,
    SessionFileError,
    SessionLockedError,
    SessionMovedError,
    SessionNotWritableError,
    SessionWriteError,
    VectorDatabase,
)
from .tree import CTree, SessionConflictError

if _TYPE_CHECKING:  # type checkers see the class; at run time it is imported on first use
    from .synthesizer import PromptSynthesizer

__all__ = [
    "CTree",
    "ConversationVector",
    "EmbedderMismatchError",
    "MessageNode",
    "PromptSynthesizer",
    "ReadOnlySessionError",
    "SessionConflictError",
    "SessionDamagedError",
    "SessionFileError",
    "SessionLockedError",
    "SessionMovedError",
    "SessionNotWritableError",
    "SessionWriteError",
    "TopicNode",
    "VectorDatabase",
]


def __getattr__(name: str) -> type:
    # PromptSynthesizer lives in its own module; import it on first use
    if name == "PromptSynthesizer":
        from .synthesizer import PromptSynthesizer

        return PromptSynthesizer
    raise AttributeError(name)

_logging.getLogger("trace_core").addHandler(_logging.NullHandler())  # a library never prints on its own
