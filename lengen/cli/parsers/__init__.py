"""The `lengen` parsers: one module per command (the names in lengen.cli.COMMANDS), each with
`add_parser(subparsers)`. They load no torch, scipy, pandas, matplotlib or transformers, so the help
prints at once: names and defaults come from `values` (generated from the registries and configs),
and each parser names its handler as a string, "lengen.cli.train:run", which lengen.cli.main
imports after parsing."""
