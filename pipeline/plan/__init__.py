"""Planning: the read strategy, tuning (engine and store), the cache policy and reading a manifest into a spec."""
