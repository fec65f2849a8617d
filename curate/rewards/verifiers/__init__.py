"""Rule-based verifiers, one module per answer type; the registry routes a record to its verifier."""
