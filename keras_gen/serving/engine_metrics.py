"""The engine's Prometheus metrics."""

import prometheus_client

from keras_gen import backend

# The content type of `EngineMetrics.text()`.
CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST


class EngineMetrics:
    """Counters, gauges and histograms of one `Engine`, in its own registry.

    `text()` is the Prometheus text format that `GET /metrics` answers.
    Names: `keras_gen_requests_total` (label `finish_reason`),
    `keras_gen_prompt_tokens_total`, `keras_gen_generated_tokens_total`,
    `keras_gen_running_requests`, `keras_gen_waiting_requests`,
    `keras_gen_program_compilations_total` (every program the engine's step
    thread traced or compiled), `keras_gen_compiling_steps` (steps still
    compiling in the background: see `Engine.warm_up`),
    `keras_gen_prefix_cache_queries_total` and
    `keras_gen_prefix_cache_hits_total` (prompt tokens looked up, and found,
    in the prefix cache), `keras_gen_prefix_cache_bytes`,
    `keras_gen_speculative_draft_tokens_total` and
    `keras_gen_speculative_accepted_tokens_total` (tokens proposed by
    speculative decoding, and kept: their ratio is the acceptance rate),
    `keras_gen_time_to_first_token_seconds` and
    `keras_gen_inter_token_latency_seconds`.

    Examples:
    >>> metrics = EngineMetrics()
    >>> metrics.generated_tokens.inc(3)
    >>> "keras_gen_generated_tokens_total 3.0" in metrics.text()
    True
    """

    def __init__(self):
        self.registry = prometheus_client.CollectorRegistry()
        registry = self.registry
        self.requests = prometheus_client.Counter(
            "keras_gen_requests",
            "Requests that ended, by finish reason.",
            ["finish_reason"],
            registry=registry,
        )
        self.prompt_tokens = prometheus_client.Counter(
            "keras_gen_prompt_tokens", "Prompt tokens admitted.", registry=registry
        )
        self.generated_tokens = prometheus_client.Counter(
            "keras_gen_generated_tokens", "Tokens handed out.", registry=registry
        )
        self.running = prometheus_client.Gauge(
            "keras_gen_running_requests", "Requests holding slots.", registry=registry
        )
        self.waiting = prometheus_client.Gauge(
            "keras_gen_waiting_requests",
            "Requests waiting for a slot.",
            registry=registry,
        )
        self.compilations = prometheus_client.Counter(
            "keras_gen_program_compilations",
            "Programs the engine's step thread traced or compiled.",
            registry=registry,
        )
        self.compiling = prometheus_client.Gauge(
            "keras_gen_compiling_steps",
            "Steps compiling in the background (requests run them eagerly).",
            registry=registry,
        )
        self.compiling.set_function(backend.background_compiles)
        self.prefix_cache_queries = prometheus_client.Counter(
            "keras_gen_prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache.",
            registry=registry,
        )
        self.prefix_cache_hits = prometheus_client.Counter(
            "keras_gen_prefix_cache_hits",
            "Prompt tokens found in the prefix cache (not computed).",
            registry=registry,
        )
        self.prefix_cache_bytes = prometheus_client.Gauge(
            "keras_gen_prefix_cache_bytes",
            "Host memory the prefix cache's blocks take.",
            registry=registry,
        )
        self.draft_tokens = prometheus_client.Counter(
            "keras_gen_speculative_draft_tokens",
            "Tokens proposed by speculative decoding.",
            registry=registry,
        )
        self.accepted_tokens = prometheus_client.Counter(
            "keras_gen_speculative_accepted_tokens",
            "Proposed tokens that were kept.",
            registry=registry,
        )
        self.time_to_first_token = prometheus_client.Histogram(
            "keras_gen_time_to_first_token_seconds",
            "From submission to the first token handed out.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )
        self.inter_token_latency = prometheus_client.Histogram(
            "keras_gen_inter_token_latency_seconds",
            "Between two tokens of a row.",
            buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=registry,
        )

    def text(self):
        return prometheus_client.generate_latest(self.registry).decode("utf-8")
