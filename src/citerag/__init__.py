"""citerag: answers over your own documents, every claim cited to an exact character range."""

__version__ = "0.1.0"
# Bumped whenever a change alters chunks or vectors for the same input, so old indexes read as stale.
PIPELINE_VERSION = "2"  # 2: sentence cuts keep German abbreviations whole (a document detected as "de")
