"""Experiments on live traffic: two pipeline arms of a collection, each a set of per-request options (mode, k,
rerank_model, shortlist, threshold, lexical_threshold, max_sources, generator), and the share of requests arm "b"
gets. A request's arm is a hash of the experiment's name and its subject, the API key (or "local") or, with
`sticky = "conversation"`, the conversation (a question outside one falls back to its key): the same person, or
the same conversation, always sees the same arm. The arm's options replace the request's own for the fields it
sets; the trace records the experiment and the arm (citerag.trace.setup.request_attributes), and so do the metrics.
The report is citerag.eval.experiment_report.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

from citerag.app.collection import Collection
from citerag.app.models import AskOptions
from citerag.errors import CiteragError
from citerag.settings import SettingsError
from citerag.types import Answer, Experiment

ARM_FIELDS = ("mode", "k", "rerank_model", "shortlist", "threshold", "lexical_threshold", "max_sources", "generator")
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
STICKY = ("key", "conversation")
RUNNING_TTL_S = 1.0  # how long a process keeps its view of the running experiment (another process's start or stop)


class ExperimentError(CiteragError):
    """An experiment that cannot start as given; `field` names what is wrong."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


_running: dict[str, tuple[float, Experiment | None]] = {}
_lock = threading.Lock()


def check_arm(collection: Collection, arm: dict[str, object], which: str) -> dict[str, object]:
    """The arm's options, checked: known fields, values the collection's settings accept."""
    unknown = sorted(set(arm) - set(ARM_FIELDS))
    if unknown:
        raise ExperimentError(f"arm {which}: unknown option {unknown[0]!r} (one of {', '.join(ARM_FIELDS)})", which)
    try:
        options = AskOptions(**arm)  # type: ignore[arg-type]
        collection.settings.with_changes(**options.changes())
    except (SettingsError, TypeError, ValueError) as exc:
        raise ExperimentError(f"arm {which}: {str(exc).splitlines()[0]}", which) from None
    return dict(arm)


def start(collection: Collection, name: str, b: dict[str, object], a: dict[str, object] | None = None,
          split: float = 0.5, sticky: str = "key") -> Experiment:
    if not NAME.fullmatch(name):
        raise ExperimentError("name: lowercase letters, digits, '.', '_' or '-', at most 64", "name")
    if not 0 < split < 1:
        raise ExperimentError("split is arm b's share of traffic: above 0 and below 1", "split")
    if sticky not in STICKY:
        raise ExperimentError(f"sticky is one of {', '.join(STICKY)}", "sticky")
    arm_a, arm_b = check_arm(collection, a or {}, "a"), check_arm(collection, b, "b")
    if arm_a == arm_b:
        raise ExperimentError("the two arms are the same pipeline", "b")
    started = collection.store.start_experiment(Experiment(name, arm_a, arm_b, split, sticky))
    _forget(collection)
    return started


def stop(collection: Collection) -> Experiment | None:
    stopped = collection.store.stop_experiment()
    _forget(collection)
    return stopped


def running(collection: Collection) -> Experiment | None:
    """The collection's running experiment, as read at most RUNNING_TTL_S ago (a request reads no table)."""
    now = time.monotonic()
    with _lock:
        seen = _running.get(collection.location)
    if seen is not None and now - seen[0] < RUNNING_TTL_S:
        return seen[1]
    found = next((e for e in collection.store.experiments() if e.stopped_at is None), None)
    with _lock:
        _running[collection.location] = (now, found)
    return found


def _forget(collection: Collection) -> None:
    with _lock:
        _running.pop(collection.location, None)


def arm_of(experiment: Experiment, subject: str) -> str:
    """ "a" or "b" for this subject, the same every time (SHA-256 of the experiment's name and the subject)."""
    digest = hashlib.sha256(f"{experiment.name}\x00{subject}".encode()).digest()
    return "b" if int.from_bytes(digest[:8], "big") / 2**64 < experiment.split else "a"


def route(collection: Collection, options: AskOptions | None, key: str,
          conversation_id: str | None = None) -> AskOptions:
    """The request's options under the running experiment, if any: its arm's fields set, the arm named."""
    options = options or AskOptions()
    experiment = running(collection)
    if experiment is None:
        return options
    subject = conversation_id if experiment.sticky == "conversation" and conversation_id else key
    arm = arm_of(experiment, subject)
    chosen = experiment.a if arm == "a" else experiment.b
    return dataclasses.replace(options, **chosen, experiment=experiment.name, arm=arm)


def mark(answer: Answer, options: AskOptions) -> Answer:
    """The answer named with the experiment arm its options came from (for its JSON and the metrics)."""
    answer.experiment, answer.arm = options.experiment, options.arm
    return answer


def marked(events: Iterator[tuple[str, Any]], options: AskOptions) -> Iterator[tuple[str, Any]]:
    """A question's events, the final answer marked (see mark)."""
    for kind, value in events:
        yield kind, mark(value, options) if kind == "answer" and isinstance(value, Answer) else value
