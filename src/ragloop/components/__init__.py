"""Pluggable components: evaluators, reformulators, prompts and the text utilities they share."""
