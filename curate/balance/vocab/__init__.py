"""The concept vocabulary: how it is built (sources, filters, PMI bigrams) and embedded (cached per model)."""
