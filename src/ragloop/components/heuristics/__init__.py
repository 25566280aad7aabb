"""What the offline components are built from (no model): the corpus they consult
(``corpus.py``), a question's parts and kind (``questions.py``), names and their spans
(``naming.py``), the judge of an answer against its evidence (``judging.py``), the extractive
answer (``extractive.py``), the rewrites of a query (``rewriting.py``) and the rule-based agent
controller (``controller.py``)."""
