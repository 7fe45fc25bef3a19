"""One module per ``tfpipe bench X`` command, each with ``add_parser(bench_subparsers)`` and ``run(args)``."""
