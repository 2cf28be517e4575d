"""After the runs: event readers, sweep tables, plots and reproduction."""
