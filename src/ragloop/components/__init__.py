"""Pluggable components: evaluators, reformulators, grounders, query understanders, refiners,
cost estimators, prompts and the text utilities they share."""
