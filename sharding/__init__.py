"""tfpipe sharding."""
