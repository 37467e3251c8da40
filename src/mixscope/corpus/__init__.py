"""Turning documents into model inputs: tokenizing, segmenting, masking, batching."""
