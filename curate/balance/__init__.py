"""Concept balancing: embed images, tag them with vocabulary concepts through FAISS, resample inversely to concept frequency, report."""
