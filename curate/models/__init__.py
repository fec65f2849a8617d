"""Model loaders: open_clip encoders (MetaCLIP by default)."""
