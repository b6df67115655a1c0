"""The load test's users: each asks the dev set's questions of one collection through POST /ask and /search.

Run by benchmarks/bench_load.py (`locust -f benchmarks/locustfile.py --headless ...` plus the options below); it is
not meant to be run by hand, but it can be, against any `citerag serve`:

    locust -f benchmarks/locustfile.py --headless -u 50 -r 50 -t 60s -H http://127.0.0.1:8000 \\
        --questions Q.json --collection default --record out.json   # the key in $CITERAG_LOAD_KEY

Request n (numbered across all users of this process) asks question(n), and every fourth goes to /search. In a
cold run (--question-count 0) question(n) is a text the server has never seen: the caches key on the question's
text, so each request misses every level. A warm run passes the cold run's request count and asks the same texts
again, through the same endpoint with the same options, so that every key the cold run wrote is found again.

What a run did goes to --record as JSON: per request (endpoint, milliseconds, error or null), the cache levels
each answer says it hit, and every distinct citation returned (document, start, end, quote), which the harness
checks against the documents' canonical texts afterwards. Locust's own statistics round latencies above 100 ms to
two significant digits; the raw milliseconds here give exact percentiles.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import gevent
from locust import events, task
from locust.contrib.fasthttp import FastHttpUser
from locust.env import Environment
from locust.exception import StopUser

KEY_VARIABLE = "CITERAG_LOAD_KEY"  # the API key, from the environment so that it is not on a command line

_counter = itertools.count()
_questions: list[str] = []
_record: dict[str, Any] = {"requests": [], "cache": {}, "citations": {}, "user_errors": []}
_quitting = False
_options_seen: list[Any] = []  # the parsed options, kept at init (not every event hands over the environment)


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument("--questions", required=True, help="JSON list of the questions to ask (texts)")
    parser.add_argument("--collection", default="default", help="the collection to ask")
    parser.add_argument("--question-count", type=int, default=0,
                        help="0: every request a new text (cold); N: cycle over the first N texts (warm)")
    parser.add_argument("--max-requests", type=int, default=20000, help="stop the run after this many requests")
    parser.add_argument("--request-timeout", type=float, default=30.0, help="seconds; a slower answer is an error")
    parser.add_argument("--think", type=float, default=0.0, help="each user waits uniform(0, THINK) s between")
    parser.add_argument("--record", required=True, help="where to write what the run did (JSON)")
    parser.add_argument("--started", default="", help="a file written once every user has been spawned")


@events.init.add_listener
def _init(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    if options is None:  # locust's library API without options: nothing to configure
        return
    _options_seen.append(options)
    _questions.extend(json.loads(Path(options.questions).read_text(encoding="utf-8")))
    if not _questions:
        raise ValueError(f"{options.questions}: no questions")
    AskUser.network_timeout = AskUser.connection_timeout = options.request_timeout


def question(n: int) -> str:
    """The n-th text. Past the first round every text carries its round, so that no two requests of a cold run
    share a text (nor a cache key) however many the run makes."""
    base = _questions[n % len(_questions)]
    round_ = n // len(_questions)
    return base if round_ == 0 else f"{base} (#{round_})"


@events.test_start.add_listener
def _test_start(**_: Any) -> None:
    _record["started_at"] = time.time()


@events.spawning_complete.add_listener
def _spawned(user_count: int, **_: Any) -> None:
    _record["spawned_at"] = time.time()
    _record["users"] = user_count
    if _options_seen and _options_seen[0].started:
        Path(_options_seen[0].started).write_text(str(user_count))


@events.request.add_listener
def _request(name: str, response_time: float, exception: BaseException | None, start_time: float = 0.0,
             **_: Any) -> None:
    # [endpoint, sent at (epoch s), milliseconds, error or null]
    _record["requests"].append([name, round(start_time, 4), round(response_time, 3),
                                None if exception is None else str(exception)[:300]])


@events.user_error.add_listener
def _user_error(exception: BaseException, **_: Any) -> None:
    # A check in a task that raised is the harness's fault or the server's; either way the run is not clean.
    _record["user_errors"].append(f"{type(exception).__name__}: {exception}"[:300])


@events.cpu_warning.add_listener
def _cpu_warning(**_: Any) -> None:
    # Locust's own process near 100% of a core: the client, not only the server, limits the figures.
    _record["cpu_warning"] = True


@events.test_stop.add_listener
def _test_stop(**_: Any) -> None:
    _record.setdefault("stopped_at", time.time())


@events.quitting.add_listener
def _quit(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    if options is not None:
        Path(options.record).write_text(json.dumps(_record), encoding="utf-8")


def _problem(path: str, data: Any) -> str | None:
    """What is wrong with a 200 answer or search result, or None. Only what can be checked here: the quotes
    against the documents' texts are checked by the harness afterwards, from the citations recorded."""
    if not isinstance(data, dict):
        return "the body is not a JSON object"
    cites = data.get("citations") if path == "ask" else data.get("results")
    if not isinstance(cites, list):
        return "no citations list"
    for c in cites:
        quote, start, end = c.get("quote"), c.get("start"), c.get("end")
        typed = isinstance(quote, str) and isinstance(start, int) and isinstance(end, int)
        if not typed or len(quote) != end - start:
            return f"citation {c.get('index')}: quote and range disagree"
        _record["citations"][f"{c['document_id']}:{start}:{end}"] = quote
    if path == "ask":
        if not data.get("refused") and not cites:
            return "an answer without a citation"
        indexes = {c.get("index") for c in cites}
        if any(m["index"] not in indexes for m in data.get("markers", [])):
            return "a marker names no citation"
        for level, hit in (data.get("cache") or {}).items():
            counts = _record["cache"].setdefault(level, [0, 0])  # [hits, lookups]
            counts[0] += bool(hit)
            counts[1] += 1
    return None


class AskUser(FastHttpUser):
    def wait_time(self) -> float:
        options = self.environment.parsed_options
        return random.uniform(0, options.think) if options is not None and options.think > 0 else 0.0

    def on_start(self) -> None:
        self.headers = {"Authorization": f"Bearer {os.environ.get(KEY_VARIABLE, '')}"}

    @task
    def ask_or_search(self) -> None:
        global _quitting
        options = self.environment.parsed_options
        n = next(_counter)
        if n >= options.max_requests:  # the run's upper bound on requests
            if not _quitting and self.environment.runner is not None:
                _quitting = True
                _record["stopped_at"] = time.time()
                # In a greenlet of its own: quit() stops every user, this one included, before it would go on to
                # end the run, so called from here it would leave the run waiting for its time limit.
                gevent.spawn(self.environment.runner.quit)
            raise StopUser()
        _record["sent"] = max(_record.get("sent", 0), n + 1)
        # A warm run cycles over the cold run's requests: the same text to the same endpoint, which cached it.
        index = n % options.question_count if options.question_count else n
        text = question(index)
        path, body = ("search", {"query": text}) if index % 4 == 3 else ("ask", {"question": text})
        with self.client.post(f"/v1/collections/{options.collection}/{path}", json=body, headers=self.headers,
                              name=path, catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {(response.text or '')[:200]}")
                return
            try:
                problem = _problem(path, response.json())
            except (ValueError, KeyError, TypeError) as exc:
                problem = f"unreadable body: {exc}"
            if problem:
                response.failure(problem)
