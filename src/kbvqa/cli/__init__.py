"""The command line: thin typer commands that parse flags, load config and call a pipeline."""
