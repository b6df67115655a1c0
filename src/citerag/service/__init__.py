"""The HTTP service: a FastAPI app over the application core (citerag.app), its API keys and its web page."""
