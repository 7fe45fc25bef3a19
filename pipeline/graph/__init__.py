"""The tf.data graph's parts: parsing, the Pipe-mode source, weighted group reads and the graph tail."""
