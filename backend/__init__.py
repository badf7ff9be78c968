"""trainwiz: backend."""
