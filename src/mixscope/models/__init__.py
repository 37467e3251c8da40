"""Model loading and architecture adapters."""
