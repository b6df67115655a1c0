"""Answering: sources, prompt, generation, citations."""
