"""An OpenAI-compatible chat client (vLLM, Ollama, llama.cpp's server, hosted APIs) over httpx.

POST {base_url}/chat/completions with the numbered-source prompt, temperature 0 by default.

- timeout: one `timeout` (seconds) for connecting and for each read; a timed-out request is not retried
  (the server is up but slow, and a retry would only double the wait) and raises GeneratorError;
- retries: connection failures, 429 and 5xx are retried up to `retries` times with exponential backoff
  (`backoff` x 2^attempt seconds, capped, or the server's Retry-After when it sends one); any other 4xx is
  the caller's mistake and fails at once;
- streaming: with `stream=True` the reply is read as server-sent events (`data: {...}` lines, ending with
  `data: [DONE]`) and each text delta goes to `on_delta` as it arrives; `generate` still returns the whole
  text, which the pipeline then checks like any other answer.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import httpx

from citerag.answer.generators.base import GeneratorError, Usage, chat_messages
from citerag.types import Citation

MAX_BACKOFF = 30.0


def retryable(status: int) -> bool:
    """Too many requests, or the server's fault: worth another try. Any other 4xx is ours."""
    return status == 429 or 500 <= status < 600


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
        message = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(message, dict):
            message = message.get("message", message)
        text = str(message)
    except (ValueError, UnicodeDecodeError):
        text = response.text
    return " ".join(text.split())[:200]


class OpenAICompatGenerator:
    name = "openai"

    def __init__(self, base_url: str, model: str = "", *, api_key: str | None = None, timeout: float = 60.0,
                 retries: int = 3, backoff: float = 0.5, stream: bool = False, max_tokens: int = 256,
                 temperature: float = 0.0, seed: int | None = 0,
                 on_delta: Callable[[str], None] | None = None, transport: httpx.BaseTransport | None = None) -> None:
        if not base_url:
            raise GeneratorError("the openai generator needs a base URL, e.g. http://127.0.0.1:8080/v1")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.stream = stream
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.on_delta = on_delta
        self.attempts = 0  # requests sent by the last call, retries included
        self.usage = Usage()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=httpx.Timeout(timeout), headers=headers, transport=transport)

    @classmethod
    def from_env(cls, base_url: str, model: str, api_key_env: str, **kwargs: Any) -> OpenAICompatGenerator:
        return cls(base_url, model, api_key=os.environ.get(api_key_env) if api_key_env else None, **kwargs)

    def close(self) -> None:
        self._client.close()

    def _body(self, prompt: str, stream: bool, messages: list[dict[str, Any]] | None = None,
              response_format: dict[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": messages or chat_messages(prompt), "temperature": self.temperature,
                                "max_tokens": self.max_tokens, "stream": stream}
        if response_format is not None:
            body["response_format"] = response_format
        if self.model:
            body["model"] = self.model
        if self.seed is not None:
            body["seed"] = self.seed
        return body

    def _wait(self, attempt: int, response: httpx.Response | None) -> None:
        delay = min(MAX_BACKOFF, self.backoff * 2 ** attempt)
        if response is not None:
            with suppress(ValueError):  # Retry-After may also be an HTTP date: keep the backoff then
                delay = min(MAX_BACKOFF, max(0.0, float(response.headers.get("retry-after", delay))))
        time.sleep(delay)

    @contextmanager
    def _post(self, body: dict[str, Any]) -> Iterator[httpx.Response]:
        """A 200 response to POST `body`, after retries; errors while reading it are not retried."""
        self.attempts = 0
        last = ""
        for attempt in range(self.retries + 1):
            self.attempts += 1
            response: httpx.Response | None = None
            try:
                response = self._client.send(self._client.build_request("POST", self.url, json=body), stream=True)
                if response.status_code != 200:
                    response.read()
            except httpx.TimeoutException as exc:
                if not isinstance(exc, httpx.ConnectTimeout):
                    raise GeneratorError(f"{self.url} did not answer within {self.timeout:g}s") from exc
                last = f"connect timeout after {self.timeout:g}s"
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if response is not None:
                try:
                    if response.status_code == 200:
                        try:
                            yield response
                        except httpx.TimeoutException as exc:
                            raise GeneratorError(f"{self.url} stalled for over {self.timeout:g}s mid-answer") from exc
                        except httpx.TransportError as exc:
                            raise GeneratorError(f"{self.url} dropped the connection mid-answer: {exc}") from exc
                        return
                    last = f"HTTP {response.status_code}: {_detail(response)}"
                    if not retryable(response.status_code):
                        raise GeneratorError(f"{self.url} refused the request ({last})")
                finally:
                    response.close()
            if attempt < self.retries:
                self._wait(attempt, response)
        raise GeneratorError(f"{self.url} failed after {self.attempts} attempt(s): {last}")

    def generate(self, question: str, sources: list[Citation], prompt: str) -> str:
        if self.stream:
            return "".join(self.stream_text(prompt)).strip()
        return self._reply(self._body(prompt, stream=False))

    def complete(self, messages: list[dict[str, Any]], response_format: dict[str, Any] | None = None) -> str:
        """The reply to chat `messages` of the caller's own (a follow-up's condense prompt, a judge's), not streamed;
        `response_format` as the OpenAI API takes it (a JSON object, constrained by a schema where the server can)."""
        return self._reply(self._body("", stream=False, messages=messages, response_format=response_format))

    def _reply(self, body: dict[str, Any]) -> str:
        with self._post(body) as response:
            response.read()
            try:
                data = response.json()
                self.usage.keep(data)
                return str(data["choices"][0]["message"]["content"] or "").strip()
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise GeneratorError(f"unexpected reply from {self.url}: {response.text[:200]!r}") from exc

    def stream_text(self, prompt: str) -> Iterator[str]:
        """The answer's text deltas as the server sends them (each also passed to `on_delta`)."""
        self.usage.tokens = None  # a stream reports no usage unless asked, and it is not asked
        with self._post(self._body(prompt, stream=True)) as response:
            for delta in sse_deltas(response.iter_lines()):
                if self.on_delta is not None:
                    self.on_delta(delta)
                yield delta


def sse_deltas(lines: Iterator[str]) -> Iterator[str]:
    """Text deltas from an OpenAI chat-completions event stream."""
    for line in lines:
        line = line.strip()
        if not line.startswith("data:"):
            continue  # comments (": ping"), event names, blank separators
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            event = json.loads(payload)
        except ValueError as exc:
            raise GeneratorError(f"malformed event in the stream: {payload[:120]!r}") from exc
        if isinstance(event, dict) and "error" in event:
            raise GeneratorError(f"the server reported an error mid-stream: {str(event['error'])[:200]}")
        for choice in event.get("choices", []) if isinstance(event, dict) else []:
            text = (choice.get("delta") or {}).get("content")
            if text:
                yield str(text)
