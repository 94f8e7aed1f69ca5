"""Run stages over records: concurrency, resume, error capture, manifest, progress."""
