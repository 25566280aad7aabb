"""The old home of RetrievalLoop's offline wiring, kept as an alias: the parts live in
:mod:`ragloop.engines.defaults.retrieval` and the constructor is
:meth:`RetrievalLoop.offline <ragloop.RetrievalLoop.offline>` (also
:func:`ragloop.offline.offline_retrieval_loop`)."""

from ragloop.engines.defaults.retrieval import OFFLINE_DEFAULTS as OFFLINE_DEFAULTS
from ragloop.offline import offline_retrieval_loop as offline_retrieval_loop
