"""The OpenAI-compatible HTTP API: a FastAPI app and `serve`.

Endpoints: `POST /v1/completions`, `POST /v1/chat/completions`,
`GET /v1/models`, `GET /health`, `GET /metrics`, vLLM's
`POST /tokenize` and `POST /detokenize`, and a chat page at `GET /`. Requests are validated by
`CompletionRequest`, run by one continuous-batching `Engine` (every request
joins the running batch) and answered as JSON or, with `"stream": true`, as
server-sent events ending with `data: [DONE]`.
"""

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import math
import pathlib
import time
import types
import uuid

import fastapi
import fastapi.responses
import starlette.exceptions

from keras_gen.generation.generation_config import GenerationConfig
from keras_gen.serving.api_error import APIError
from keras_gen.serving.completion_request import CompletionRequest
from keras_gen.serving.engine import PREFILL_CHUNK_TOKENS
from keras_gen.serving.engine import PREFILL_PAUSE
from keras_gen.serving.engine import Engine
from keras_gen.serving.engine import EngineClosed
from keras_gen.serving.engine import EngineFull
from keras_gen.serving.engine_metrics import CONTENT_TYPE
from keras_gen.serving.response_store import ResponseStore
from keras_gen.serving.responses_request import ResponsesRequest
from keras_gen.serving.responses_stream import ResponsesStream
from keras_gen.serving.tokenize_request import TokenizeRequest
from keras_gen.streaming.reasoning_splitter import ReasoningSplitter
from keras_gen.utils.ticker import Ticker

MAX_BODY_BYTES = 1 << 20
# A request's preparation (its options, tokenizing, a constraint's
# automaton) runs on these threads: never on the event loop, which keeps
# answering (`/health` among others), nor on the engine's step thread.
PREPARE_THREADS = 2
# Requests that may be in preparation at once; more get a 429.
MAX_PREPARING = 64
# Seconds a preparation may take before its request gets a 503 (the work
# then ends on its own, and what it submitted is cancelled).
PREPARE_TIMEOUT = 60.0
OBJECTS = {
    "completion": ("cmpl", "text_completion", "text_completion"),
    "chat": ("chatcmpl", "chat.completion", "chat.completion.chunk"),
}


async def _read_json(request, max_body_bytes):
    """The request's JSON body, with OpenAI-shaped errors."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_body_bytes:
        raise _too_large(max_body_bytes)
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > max_body_bytes:
            raise _too_large(max_body_bytes)
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise APIError(
            f"We could not parse the JSON body of your request: {error}.",
            code="invalid_json",
        ) from None
    except RecursionError:
        raise APIError(
            "The JSON body of your request is nested too deeply.",
            code="invalid_json",
        ) from None


# What a non-finite float becomes in a response: JSON has no NaN or
# Infinity. -inf (a banned token's log-probability) is vLLM's -9999.0.
NON_FINITE = {float("-inf"): -9999.0, float("inf"): 9999.0}


def _finite(data):
    """`data` with every NaN and infinity replaced (see `NON_FINITE`)."""
    if isinstance(data, float) and not math.isfinite(data):
        return NON_FINITE.get(data)
    if isinstance(data, dict):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(value) for value in data]
    return data


# Characters that JSON leaves as they are but that line readers
# (`str.splitlines`, httpx's `iter_lines`) take for line ends: escaped, so
# an event's data stays on one line.
_LINE_BREAKS = str.maketrans(
    {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def _dumps(data):
    text = json.dumps(_finite(data), ensure_ascii=False, allow_nan=False)
    return text.translate(_LINE_BREAKS)


class _JSONResponse(fastapi.responses.JSONResponse):
    """A JSON response that never writes NaN or Infinity."""

    def render(self, content):
        return _dumps(content).encode("utf-8")


def _too_large(limit):
    return APIError(
        f"The request body is larger than {limit} bytes.",
        status=413,
        code="request_too_large",
    )


def _error_response(error):
    return _JSONResponse(error.to_dict(), status_code=error.status)


class _Completion:
    """Accumulates a request's chunks into OpenAI response objects."""

    def __init__(self, request, served):
        self.request = request
        self.tokenizer = served.tokenizer
        self.model = served.name
        prefix, self.object, self.chunk_object = OBJECTS[request.kind]
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        rows = len(request.rows)
        self.text = [""] * rows
        self.tokens = [[] for _ in range(rows)]
        self.log_probs = [[] for _ in range(rows)]
        self.top = [[] for _ in range(rows)]
        self.vocabulary_outputs = {
            name: [[] for _ in range(rows)] for name in request.outputs
        }
        self.finish_reasons = [None] * rows
        # A chat with tools: the replies' calls, parsed; the content a
        # stream has sent (text that may start a call is held back).
        self.parser = request.tool_parser
        self.shown = [0] * rows
        # A thinking template's replies: reasoning apart from content.
        self.splitters = self.reasoning = None
        if request.thinking is not None:
            self.splitters = [ReasoningSplitter(request.thinking) for _ in range(rows)]
            self.reasoning = [""] * rows

    def add(self, offset, chunk):
        """Take in an engine chunk for the rows from `offset` on; returns,
        per row, its index, its piece and its finish reason if it ended."""
        added = []
        for r, piece in enumerate(_pieces(chunk), offset):
            if self.finish_reasons[r] is not None:  # ended in an earlier chunk
                continue
            if self.splitters is not None:
                reasoning, piece["text"] = self.splitters[r].feed(piece["text"])
                if piece["finish_reason"] is not None:
                    rest = self.splitters[r].finish()
                    reasoning, piece["text"] = (
                        reasoning + rest[0],
                        piece["text"] + rest[1],
                    )
                piece["reasoning"] = reasoning
                self.reasoning[r] += reasoning
            self.text[r] += piece["text"]
            self.tokens[r] += piece["token_ids"]
            self.log_probs[r] += piece["log_probs"] or []
            self.top[r] += piece["top_logprobs"] or []
            for name, rows in self.vocabulary_outputs.items():
                rows[r] += piece[name]
            self.finish_reasons[r] = piece["finish_reason"]
            added.append((r, piece, piece["finish_reason"]))
        return added

    def _token_text(self, token_id):
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def logprobs(self, token_ids, log_probs, top, offset=0):
        if self.request.logprobs is None:
            return None
        top = top or [None] * len(token_ids)
        if self.request.kind == "chat":
            return {
                "content": [
                    {
                        **self._entry(t, lp),
                        "top_logprobs": [self._entry(i, v) for i, v in alts or []],
                    }
                    for t, lp, alts in zip(token_ids, log_probs, top)
                ]
            }
        texts = [self._token_text(t) for t in token_ids]
        offsets = []
        for text in texts:
            offsets.append(offset)
            offset += len(text)
        return {
            "tokens": texts,
            "token_logprobs": log_probs,
            "top_logprobs": (
                [{self._token_text(i): v for i, v in alts} for alts in top]
                if self.request.logprobs
                else None
            ),
            "text_offset": offsets,
        }

    def _entry(self, token_id, log_prob):
        text = self._token_text(token_id)
        return {"token": text, "logprob": log_prob, "bytes": list(text.encode())}

    def usage(self):
        prompt = sum(len(p) for p in self.request.prompts)
        completion = sum(len(t) for t in self.tokens)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _choice(
        self,
        index,
        text,
        logprobs,
        reason,
        delta=False,
        outputs=None,
        reasoning=None,
        tool_calls=None,
    ):
        """One choice; `outputs` holds its per-token `scores` or `logits`
        (the request's `output_scores` and `output_logits`), `reasoning` a
        thinking template's reasoning (a delta has it or content),
        `tool_calls` the calls parsed from the reply."""
        if self.request.kind == "completion":
            choice = {"index": index, "text": text, "logprobs": logprobs}
        else:
            key = "delta" if delta else "message"
            message = {} if delta else {"role": "assistant"}
            if reasoning is not None and (reasoning or not delta):
                message["reasoning_content"] = reasoning
            if text or not (delta and (reasoning or tool_calls)):
                message["content"] = text
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice = {"index": index, key: message, "logprobs": logprobs}
        return {**choice, **(outputs or {}), "finish_reason": reason}

    def _envelope(self, object_name, choices):
        return {
            "id": self.id,
            "object": object_name,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def response(self):
        choices = []
        for r in range(len(self.text)):
            text, calls, reason = self.text[r], None, self.finish_reasons[r]
            if self.parser is not None:
                content, calls = self._calls(r)
                if calls:
                    text, reason = content, "tool_calls"
            choices.append(
                self._choice(
                    r,
                    text,
                    self.logprobs(self.tokens[r], self.log_probs[r], self.top[r]),
                    reason,
                    outputs={n: rows[r] for n, rows in self.vocabulary_outputs.items()},
                    reasoning=None if self.reasoning is None else self.reasoning[r],
                    tool_calls=calls,
                )
            )
        return {**self._envelope(self.object, choices), "usage": self.usage()}

    def _calls(self, r):
        """`(content, calls)` of row `r`'s whole reply, the calls in
        OpenAI's form (their arguments a JSON string)."""
        content, calls = self.parser.parse(self.text[r])
        return content, [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": json.dumps(call["arguments"], ensure_ascii=False),
                },
            }
            for call in calls
        ]

    def _tool_piece(self, r, reason):
        """A streamed piece of a chat with tools: `(content, calls,
        reason)`. Content goes out while it cannot be a call; the calls
        (and content after them) when the reply ends."""
        text, shown = self.text[r], self.shown[r]
        if reason is None:
            self.shown[r] = max(shown, self.parser.content_length(text))
            return text[shown : self.shown[r]], None, None
        content, calls = self._calls(r)
        if not calls:
            self.shown[r] = len(text)
            return text[shown:], None, reason
        before = text[:shown]
        content = content or ""
        rest = content[len(before) :] if content.startswith(before) else ""
        return (
            rest,
            [{"index": i, **call} for i, call in enumerate(calls)],
            "tool_calls",
        )

    def first_chunk(self):
        """Chat streams open with the assistant's role, as OpenAI's do."""
        choices = [
            {
                "index": r,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            for r in range(len(self.text))
        ]
        return self._envelope(self.chunk_object, choices)

    def chunk(self, added):
        choices = []
        for r, piece, reason in added:
            if not piece["text"] and not piece["token_ids"] and reason is None:
                continue
            offset = len(self.text[r]) - len(piece["text"])
            logprobs = self.logprobs(
                piece["token_ids"],
                piece["log_probs"] or [],
                piece["top_logprobs"],
                offset,
            )
            outputs = {name: piece[name] for name in self.vocabulary_outputs}
            text, calls = piece["text"], None
            if self.parser is not None:
                text, calls, reason = self._tool_piece(r, reason)
            shows = text or piece.get("reasoning") or calls or reason
            if not (shows or logprobs or outputs):  # all held back
                continue
            choices.append(
                self._choice(
                    r,
                    text,
                    logprobs,
                    reason,
                    True,
                    outputs,
                    piece.get("reasoning"),
                    calls,
                )
            )
        return self._envelope(self.chunk_object, choices) if choices else None

    def usage_chunk(self):
        return {**self._envelope(self.chunk_object, []), "usage": self.usage()}


def _sse(data):
    return f"data: {_dumps(data)}\n\n"


def _pieces(chunk):
    """Per row of an engine chunk: its text, tokens, log-probabilities,
    top alternatives (`(token id, log-probability)` pairs per token), per
    token scores and logits (when asked) and finish reason, as plain Python
    values."""
    for r, token_ids in enumerate(chunk.token_ids):
        top = None
        if chunk.top_token_ids is not None:
            top = [
                [(int(t), float(v)) for t, v in zip(ids, values)]
                for ids, values in zip(chunk.top_token_ids[r], chunk.top_log_probs[r])
            ]
        yield {
            "text": chunk.text[r],
            "token_ids": [int(t) for t in token_ids],
            "log_probs": (
                None
                if chunk.log_probs is None
                else [float(v) for v in chunk.log_probs[r]]
            ),
            "top_logprobs": top,
            **{
                name: getattr(chunk, name)[r].tolist()
                for name in ("scores", "logits")
                if getattr(chunk, name) is not None
            },
            "finish_reason": chunk.finish_reasons[r],
        }


def _submit(engine, request):
    """One engine handle per prompt of `request`, each with `n` rows."""
    handles = []
    try:
        for prompt in request.prompts:
            handles.append(
                engine.submit(
                    prompt,
                    request.config,
                    request.processors,
                    num_return_sequences=request.n,
                )
            )
    except EngineFull as error:
        _cancel(handles)
        raise APIError(
            str(error), status=429, type="rate_limit_error", code="rate_limit_exceeded"
        ) from None
    except EngineClosed as error:
        _cancel(handles)
        raise _unavailable(error) from None
    except (TypeError, ValueError) as error:
        _cancel(handles)
        raise APIError(str(error)) from None
    return handles


class _Preparation:
    """Requests prepared on a few threads, a bounded number at once, each
    within `PREPARE_TIMEOUT` seconds."""

    def __init__(self):
        self.executor = concurrent.futures.ThreadPoolExecutor(
            PREPARE_THREADS, thread_name_prefix="keras-gen-prepare"
        )
        self.running = 0  # read and written on the event loop only

    async def run(self, work):
        """`work()`'s result (a `(request, handles)` pair, or a tokenization's
        answer), computed on a preparation thread."""
        if self.running >= MAX_PREPARING:
            raise APIError(
                f"{MAX_PREPARING} requests are being prepared; try again.",
                status=429,
                type="rate_limit_error",
                code="rate_limit_exceeded",
            )
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self.executor, work)
        self.running += 1

        def ended(_):
            self.running -= 1

        future.add_done_callback(ended)
        try:
            return await asyncio.wait_for(asyncio.shield(future), PREPARE_TIMEOUT)
        except asyncio.TimeoutError:
            future.add_done_callback(_cancel_prepared)
            raise APIError(
                f"Preparing the request took more than {PREPARE_TIMEOUT:g} s "
                "(a large structured output?).",
                status=503,
                type="server_error",
                code="timeout",
            ) from None

    def close(self):
        self.executor.shutdown(wait=False, cancel_futures=True)


def _cancel_prepared(future):
    """Cancel what a preparation that came too late submitted."""
    if not future.cancelled() and future.exception() is None:
        _cancel(future.result()[1])


def _unavailable(error):
    return APIError(str(error), status=503, type="server_error", code="unavailable")


def _cancel(handles):
    for handle in handles:
        handle.cancel()


async def _chunks(handles, n):
    """`(first row, chunk)` for the chunks of every handle, as they come."""
    queue = asyncio.Queue()

    async def pump(index, handle):
        try:
            async for chunk in handle:
                await queue.put((index * n, chunk, None))
        except Exception as error:  # handed to the reader below
            await queue.put((index * n, None, error))
        else:
            await queue.put((index * n, None, None))

    tasks = [asyncio.create_task(pump(i, h)) for i, h in enumerate(handles)]
    try:
        running = len(tasks)
        while running:
            offset, chunk, error = await queue.get()
            if isinstance(error, EngineClosed):
                raise _unavailable(error)
            if error is not None:
                raise error
            if chunk is None:
                running -= 1
            else:
                yield offset, chunk
    finally:
        for task in tasks:
            task.cancel()


async def _stream_objects(handles, completion):
    """The stream's objects: chunks, an error object if one happens after
    the status was sent, and the usage chunk when asked for."""
    try:
        if completion.request.kind == "chat":
            yield completion.first_chunk()
        try:
            async for offset, chunk in _chunks(handles, completion.request.n):
                event = completion.chunk(completion.add(offset, chunk))
                if event is not None:
                    yield event
        except Exception as error:  # the status is sent: say it in the stream
            if not isinstance(error, APIError):
                error = APIError(
                    f"Internal error: {error}", status=500, type="server_error"
                )
            yield error.to_dict()
        if completion.request.include_usage:
            yield completion.usage_chunk()
    finally:
        # Ended, or the client went away (the response task is cancelled).
        _cancel(handles)


async def _stream_events(handles, completion):
    try:
        async for event in _stream_objects(handles, completion):
            yield _sse(event)
        yield "data: [DONE]\n\n"
    finally:  # the client went away: the inner stream may not be closed yet
        _cancel(handles)


async def _response_events(asked, handles, completion, store):
    """The Responses stream of a chat stream; the response is kept."""
    stream = ResponsesStream(asked)
    last, reason, usage = None, None, None
    try:
        async for chunk in _stream_objects(handles, completion):
            for event in stream.events(chunk):
                yield f"event: {event['type']}\ndata: {_dumps(event)}\n\n"
            if "error" in chunk:
                return
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", []):
                reason = choice.get("finish_reason") or reason
            last = chunk
        events, response = stream.finish(last, reason, usage)
        for event in events:
            yield f"event: {event['type']}\ndata: {_dumps(event)}\n\n"
        store.put(response["id"], asked.conversation(response))
    finally:
        _cancel(handles)


async def _complete(request, handles, completion):
    watcher = asyncio.create_task(_cancel_on_disconnect(request, handles))
    try:
        async for offset, chunk in _chunks(handles, completion.request.n):
            completion.add(offset, chunk)
    finally:
        watcher.cancel()
        _cancel(handles)
    return completion.response()


async def _cancel_on_disconnect(request, handles):
    """Cancel `handles` when the client of a plain request goes away."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    _cancel(handles)


def _add_error_handlers(app):
    """Every error, ours or the framework's, in the OpenAI error shape."""

    @app.exception_handler(APIError)
    async def api_error(request, error):
        return _error_response(error)

    @app.exception_handler(starlette.exceptions.HTTPException)
    async def http_error(request, error):
        return _error_response(
            APIError(str(error.detail), status=error.status_code, code=None)
        )

    app.add_middleware(_ServerErrors)


class _ServerErrors:
    """Answers an unexpected error as an OpenAI-shaped 500.

    An ASGI middleware, not `exception_handler(Exception)`: Starlette
    re-raises after that handler answers, and the server then drops the
    keep-alive connection. An error after the response has started (in a
    stream) cannot change its status and is re-raised.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracking_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as error:  # the server and connection stay up
            if started:
                raise
            response = _error_response(
                APIError(
                    f"Internal error: {type(error).__name__}: {error}",
                    status=500,
                    type="server_error",
                )
            )
            await response(scope, receive, send)


def _add_routes(app, engine, served, started, max_body_bytes, preparation):
    """The endpoints."""
    import keras

    model_name = served.name
    page = (pathlib.Path(__file__).parent / "static" / "chat.html").read_text("utf-8")

    @app.get("/", response_class=fastapi.responses.HTMLResponse)
    async def chat_page():
        """A chat page: everything it needs is in the page itself."""
        return page

    @app.get("/health")
    async def health():
        return {
            "status": "ok",
            "model": model_name,
            "backend": keras.config.backend(),
            **engine.stats,
        }

    @app.get("/metrics")
    async def metrics():
        return fastapi.responses.Response(
            engine.metrics.text(), media_type=CONTENT_TYPE
        )

    @app.get("/v1/models")
    async def models():
        return {
            "object": "list",
            "data": [
                {
                    "id": model_name,
                    "object": "model",
                    "created": started,
                    "owned_by": "keras-gen",
                    "context_length": served.context_length,
                }
            ],
        }

    async def generate(request, kind):
        body = await _read_json(request, max_body_bytes)

        def prepare():
            parsed = CompletionRequest(body, kind, served)
            return parsed, _submit(engine, parsed)

        parsed, handles = await preparation.run(prepare)
        completion = _Completion(parsed, served)
        if parsed.stream:
            return fastapi.responses.StreamingResponse(
                _stream_events(handles, completion),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        return await _complete(request, handles, completion)

    @app.post("/v1/completions")
    async def completions(request: fastapi.Request):
        return await generate(request, "completion")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: fastapi.Request):
        return await generate(request, "chat")

    store = ResponseStore()

    @app.post("/v1/responses")
    async def responses(request: fastapi.Request):
        body = await _read_json(request, max_body_bytes)

        def prepare():
            asked = ResponsesRequest(body, store)
            chat = asked.chat
            if chat.get("stream"):
                chat = {**chat, "stream_options": {"include_usage": True}}
            try:
                parsed = CompletionRequest(chat, "chat", served)
            except APIError as error:
                raise asked.renamed(error) from None
            return (asked, parsed), _submit(engine, parsed)

        (asked, parsed), handles = await preparation.run(prepare)
        completion = _Completion(parsed, served)
        if parsed.stream:
            return fastapi.responses.StreamingResponse(
                _response_events(asked, handles, completion, store),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        response = asked.response(await _complete(request, handles, completion))
        store.put(response["id"], asked.conversation(response))
        return response

    async def tokenization(request, kind):
        body = await _read_json(request, max_body_bytes)
        return await preparation.run(
            lambda: TokenizeRequest(body, kind, served).answer()
        )

    @app.post("/tokenize")
    async def tokenize(request: fastapi.Request):
        return await tokenization(request, "tokenize")

    @app.post("/detokenize")
    async def detokenize(request: fastapi.Request):
        return await tokenization(request, "detokenize")


def server_defaults(lm):
    """The options of a request that sets none: the model's
    `generation_config.json` numbers (as vLLM reads them: its `do_sample`
    and beam search options aside), over OpenAI's temperature of 1."""
    model = lm.generation_config.without("sampling").merge(
        {
            name: getattr(lm.generation_config, name)
            for name in ("temperature", "top_k", "top_p", "min_p")
            if getattr(lm.generation_config, name) is not None
        }
    )
    return GenerationConfig(temperature=1.0).merge(model)


def create_app(
    lm,
    model_name="demo",
    max_batch_size=8,
    max_length=None,
    max_queue=256,
    chunk_size=None,
    warm_up=False,
    max_body_bytes=MAX_BODY_BYTES,
    logits_processors=None,
    prefix_cache_bytes=None,
    prefill_chunk_tokens=PREFILL_CHUNK_TOKENS,
    prefill_pause=PREFILL_PAUSE,
    num_speculative_tokens=None,
    draft_model=None,
):
    """A FastAPI app serving `lm` with the OpenAI completions API.

    Every request runs on one `Engine` (continuous batching: requests join
    the running batch between chunks of steps, whatever their settings).
    The app starts the engine's work with its lifespan and closes the engine
    when it shuts down. Beam and contrastive search are not served
    (vLLM's `use_beam_search: true` gets a 400): use `CausalLM.generate`
    or `CausalLM.stream`, which stream every returned beam.

    Args:
        lm: a `keras_gen.models.CausalLM` with a tokenizer.
        model_name: str, the name clients pass as `model`.
        max_batch_size: int, the engine's slots (rows decoded together;
            also the most `n` of one request).
        max_length: int, prompt plus completion a request may reach; by
            default the model's context (at most 2048).
        max_queue: int, requests that may wait for a slot; more get a 429.
        chunk_size: int, decode steps between two admissions (and stream
            events); by default about 50 ms of them (see `Engine`).
        warm_up: `"background"`, `True` or `False`: compile every program
            at startup, before serving; `"background"` serves as soon as
            every program can run, while torch compiles its decode step on
            a thread of its own (requests run it eagerly until then; JAX
            and TensorFlow wait for their compiles either way: see
            `Engine.warm_up`).
        max_body_bytes: int, larger request bodies get a 413.
        logits_processors: a dict from a name to a
            `keras_gen.processors.LogitsProcessor` class or instance (your
            own too): processors a request selects by name, with its
            arguments, in `processors` (`{"name": {"argument": value}}`)
            or vLLM's `vllm_xargs` (`{"name.argument": value}`). Their
            numbers are each request's own: any mix of requests with and
            without them runs in the engine's one compiled step (see
            `Engine`).
        prefix_cache_bytes: int, host memory for the prompt prefixes the
            engine reuses (0: none); by default the key/value cache's size,
            at most 1 GiB. A request opts out with `"cache_prompt": false`.
        prefill_chunk_tokens: int, the most prompt tokens one prefill
            chunk computes (see `Engine`).
        prefill_pause: float, how long prefill may pause the running
            requests between two decode chunks, in decode chunks (see
            `Engine`).
        num_speculative_tokens: int, the most tokens a request's prompt
            lookup (its `"prompt_lookup_ngram"`) or the `draft_model`
            proposes per step; by default none (4 with a draft model):
            requests with `"prompt_lookup_ngram"` get a 400.
        draft_model: a smaller `CausalLM` with `lm`'s vocabulary: every
            request speculates with it (up to its own
            `"num_speculative_tokens"`; see `Engine`).

    Examples:
    >>> app = create_app(CausalLM.from_preset("demo"))  # doctest: +SKIP
    >>> uvicorn.run(app, host="127.0.0.1", port=8000)  # doctest: +SKIP
    """
    if lm.tokenizer is None:
        raise ValueError("The served model needs a tokenizer.")
    engine = Engine(
        lm,
        max_batch_size=max_batch_size,
        max_length=max_length,
        chunk_size=chunk_size,
        max_queue=max_queue,
        generation_config=server_defaults(lm),
        processors=logits_processors,
        prefix_cache_bytes=prefix_cache_bytes,
        prefill_chunk_tokens=prefill_chunk_tokens,
        prefill_pause=prefill_pause,
        num_speculative_tokens=num_speculative_tokens,
        draft_model=draft_model,
    )
    served = types.SimpleNamespace(
        name=model_name,
        tokenizer=lm.tokenizer,
        vocabulary_size=lm.backbone.vocabulary_size,
        context_length=engine.max_length,
        max_batch_size=engine.num_slots,
        end_token_ids=(
            lm.generation_config.eos_token_id or lm.tokenizer.eos_token_ids or []
        ),
        processors=engine.processors,
    )
    started = int(time.time())

    @contextlib.asynccontextmanager
    async def lifespan(app):
        reporter = None
        if warm_up:
            log = logging.getLogger("uvicorn.error")
            log.info("Compiling the engine's programs before serving...")
            begun = time.perf_counter()
            background = warm_up == "background"
            with Ticker("compiling", closing_line=False):
                await asyncio.to_thread(engine.warm_up, background=background)
            log.info("Ready in %.1f s.", time.perf_counter() - begun)
            if engine.compiling:
                log.info(
                    "The decode step compiles in the background; requests "
                    "run it eagerly (slower) until then."
                )
                reporter = asyncio.create_task(_report_compiled(engine, log, begun))
        yield
        if reporter is not None:
            reporter.cancel()
        preparation.close()
        await asyncio.to_thread(engine.close)

    app = fastapi.FastAPI(
        title="keras-gen", lifespan=lifespan, default_response_class=_JSONResponse
    )
    app.state.engine = engine
    app.state.served = served

    _add_error_handlers(app)
    preparation = _Preparation()
    _add_routes(app, engine, served, started, max_body_bytes, preparation)
    return app


async def _report_compiled(engine, log, begun):
    while engine.compiling:
        await asyncio.sleep(0.5)
    log.info("The decode step compiled in %.1f s.", time.perf_counter() - begun)


def serve(lm, host="127.0.0.1", port=8000, model_name="demo", **options):
    """Serve `lm` with uvicorn until interrupted (see `create_app`)."""
    import uvicorn

    uvicorn.run(
        create_app(lm, model_name=model_name, **options),
        host=host,
        port=port,
        log_level="info",
    )
