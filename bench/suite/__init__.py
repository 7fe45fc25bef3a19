"""``tfpipe bench all``: every README benchmark N times in fresh processes; median, range, load and target."""
