"""Per-collection refusal: a rule calibrated on synthetic in-domain questions and a bank of out-of-domain ones."""

from citerag.refusal.rule import RefusalRule

__all__ = ["RefusalRule"]
