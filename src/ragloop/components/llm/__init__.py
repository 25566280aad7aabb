"""What the LLM-backed components share: the prompts (``prompts.py``, retrieved text fenced as
data) and fitting a conversation to a model's window with bounded replies (``fitting.py``)."""
