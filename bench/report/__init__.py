"""What a measurement becomes: plain-text tables, JSON and PNG figures."""
