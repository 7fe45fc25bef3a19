"""Pure options and spec dataclasses: every choice of an input graph, validated, no I/O and no TensorFlow."""
