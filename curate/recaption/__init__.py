"""Recaptioning: English and Chinese captions from a VLM backend, with caption checks and cleaning."""
