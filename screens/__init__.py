"""trainwiz: screens."""
