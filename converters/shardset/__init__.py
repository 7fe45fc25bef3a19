"""Shard sets: the feature schema's home on disk. ``naming`` (one template that formats, parses and globs),
``manifest`` (the pure model of ``index.json``), ``options`` (``ShardOutputOptions``), ``cuts`` (pure shard-cut
planning), ``writer`` (size-bounded, atomic ``ShardSetWriter``), ``reader`` (``read_manifest``) and ``verify``."""
