"""Mid-epoch resume: the input state, the delay order, the resumable graph, record offsets, seek, checkpoints."""
