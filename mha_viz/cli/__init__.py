"""The command line: main.py parses (before torch loads) and runs one module per command; options.py holds
the options several commands share. Nothing imports this package."""
