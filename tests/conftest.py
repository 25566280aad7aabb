"""No test may call a real model: requests are switched off for the whole suite.

The provider tests open the switch for loopback servers only (``tests/providers/conftest.py``).
"""

from __future__ import annotations

from ragloop import providers

providers.ALLOW_MODEL_REQUESTS = False
