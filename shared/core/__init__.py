"""The queue core: a job's whole life from enqueue to a final state.

Nothing here imports the operator side or a feature; they build on these verbs.
"""
