"""Small units of work with a typed config, run by the runner over records."""
