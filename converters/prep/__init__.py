"""Write-time data preparation between a converter and its shard writer: a global shuffle with bounded memory
(``shuffle``), exact label balancing (``balance``) and per-label shard sets (``split``), all deterministic for
a seed and independent of the worker count. ``keys`` holds the keyed permutation they share."""
