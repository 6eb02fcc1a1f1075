"""What `GET /metrics` answers, in Prometheus' text format: requests by endpoint and status, their
latency, the batches the worker runs (items and tokens each), the queue's depth and the tokens run.

Each application has its own `CollectorRegistry`, not prometheus_client's global one, so that
several applications in one process (the tests) count apart.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.requests import Request
from starlette.responses import Response

# Seconds: from a cached micro-model answer to the default --timeout of 60 s.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
POWERS_OF_TWO = tuple(float(2**k) for k in range(17))  # 1 .. 65,536: items or tokens in a batch
# Every label value comes from a closed set, whatever a client sends: a series per made-up method
# (or status) would grow every scrape without bound. RFC 9110's methods and PATCH (RFC 5789).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
OTHER = "other"


class Metrics:
    """The application's instruments, in their own registry."""

    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "roberta_requests", "HTTP requests answered", ["endpoint", "method", "status"], registry=r
        )
        self.latency = Histogram(
            "roberta_request_duration_seconds",
            "time from a request's arrival to its answer's last byte",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # A batch is one hub call of the worker: one forward pass, but for an /answer context
        # longer than the model's positions (a pass per window).
        self.batch_items = Histogram(
            "roberta_batch_items",
            "texts (or questions) per batch the worker runs",
            buckets=POWERS_OF_TWO,
            registry=r,
        )
        self.batch_tokens = Histogram(
            "roberta_batch_tokens",
            "tokens per batch the worker runs, padding left out",
            buckets=POWERS_OF_TWO,
            registry=r,
        )
        self.tokens = Counter("roberta_tokens", "tokens run through the model", registry=r)
        self.queue = Gauge("roberta_queue_depth", "requests waiting for the worker", registry=r)

    def request(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        """One answered request; `endpoint` is already a served path or "unmatched"."""
        method = method if method in METHODS else OTHER
        status_label = str(status) if 100 <= status <= 599 else OTHER
        self.requests.labels(endpoint, method, status_label).inc()
        self.latency.labels(endpoint).observe(seconds)

    def batch(self, lengths: list[int]) -> None:
        """One batch's items, by their tokens (the batcher's `on_batch`)."""
        self.batch_items.observe(len(lengths))
        self.batch_tokens.observe(sum(lengths))
        self.tokens.inc(sum(lengths))

    def watch_queue(self, depth: Callable[[], int]) -> None:
        """The queue gauge reads `depth()` at each scrape."""
        self.queue.set_function(depth)

    async def page(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)
