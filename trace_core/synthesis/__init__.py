"""The synthesizer's stages, each a small unit with one job:

candidates (``candidates.py``) → scoring and fusion (``fusion.py``) → budgeted
selection (``selection.py``) → rendering (``rendering.py``). Their parameters are one
frozen ``SynthesisParams`` (``params.py``); what a call injected, and why, is a
``RetrievalReport`` (``report.py``). ``trace_core.synthesizer.PromptSynthesizer``
runs them in order.
"""

from .params import SynthesisParams
from .report import InjectedExchange, InjectedPath, RetrievalReport

__all__ = ["InjectedExchange", "InjectedPath", "RetrievalReport", "SynthesisParams"]
