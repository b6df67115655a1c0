"""The application core: every entry point (the CLI, `eval`, the HTTP service, the queue workers, the tests)
goes through it, and it composes the pipeline once. Callers import each name from the module it lives in.

    home.py        Citerag: the collections of one process (a home's catalog) and what they share
    shared.py      encoders, rerankers, generators and caches, loaded once per process
    collection.py  one collection: writes, calibration of its refusal rule, reads, status
    query.py       the question path: embed → retrieve → rerank → gate → cite → generate → check, cached, traced
    caching.py     cache keys that name everything a value depends on
    models.py      options, status and the errors a caller handles (dataclasses)
    files.py       one file extracted or chunked, as `citerag extract` and `citerag chunk` show it

Per-request options (`SearchOptions`, `AskOptions`) default to the collection's settings and are validated
through them, so a bad value is a one-line SettingsError naming the field, never a silent NO ANSWER.
"""
