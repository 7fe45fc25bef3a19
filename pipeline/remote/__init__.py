"""Remote sets: the checked shard downloader, the per-host shard cache and the stream that reads ahead."""
