"""trainwiz: widgets."""
