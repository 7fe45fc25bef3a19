"""TFRecord files and ``tf.train.Example`` bytes, without TensorFlow: CRC32C and framing kernels (``crc``),
the CRC-checking reader (``reader``), the feature schema (``schema``) and the compiled Example serializer
(``examples``). Submodules are imported explicitly (the kernels load numba)."""
