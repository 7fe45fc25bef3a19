"""tfpipe bench."""
