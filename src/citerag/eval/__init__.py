"""Evaluation: needle ground truth, metrics with Wilson intervals, paired sign tests, threshold
calibration, reports and a regression gate. No LLM call anywhere: retrieval only."""
