"""The bottom floor: records, protocols, budgets, errors, tolerant JSON, sync/async calls.

Nothing here imports from the rest of ragloop.
"""
