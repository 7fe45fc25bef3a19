"""tfpipe pipeline."""
