"""The `floorfirst` command line: thin typer commands that parse, load specs, call the library
and render (tables for people, `--json` for programs, `--plot` for pictures)."""
