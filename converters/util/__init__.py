"""Small utilities every layer uses: errors, byte units, file digests, an ordered parallel map, progress
bars, host facts, lazy package exports, the numba ``njit`` shim and durable-file helpers.

Nothing here imports another part of tfpipe, so every package can import it.
"""
