"""The measuring core: input wait per step, variants against one step, steps, models, graph variants, threads."""
