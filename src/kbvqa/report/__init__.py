"""Tables, plots and the static HTML report."""
