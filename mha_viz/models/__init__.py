"""The only package that imports transformers: sources, loading, tokens, the recording attention function."""
