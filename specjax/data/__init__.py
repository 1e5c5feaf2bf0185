"""Corpus reading, tokenizer training/loading, deterministic resumable batching."""
