"""Process plumbing: torch's thread count on a shared machine, garbage-collector pauses."""
