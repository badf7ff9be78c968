"""trainwiz: presets."""
