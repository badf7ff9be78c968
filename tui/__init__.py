"""trainwiz: tui."""
