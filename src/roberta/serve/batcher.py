"""The dynamic batcher: requests queue, one worker thread takes what has arrived and runs it together.

A request is a `Job`: a key (what to run: the endpoint and the options that must be equal within
one hub call, e.g. ("embed", layer, pool)), its items (texts or token ids) and their token count.
The worker takes every job that has arrived, up to `max_batch_tokens` tokens, waiting up to
`max_wait` for more only when fewer have arrived; jobs that arrive while it runs form the next
round, so under load batches grow by themselves and an idle server runs a request at once (the
continuous batching of text-embeddings-inference). Jobs of one key run as one call of `run`
(the hub's list call, which sorts by length and pads per batch), and each job gets its own
slice of the results back, in order.

The worker is a thread, not a coroutine: a forward pass holds no GIL for its matrix products, so
the event loop keeps parsing requests while the model runs. A job whose caller stopped waiting
(timeout, disconnect) is dropped before it runs, freeing its place in the queue.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

# What the worker calls: (key, every item of the round's jobs with that key) -> one result per item.
Run = Callable[[Hashable, list], Sequence]


class QueueFull(Exception):
    """The queue holds `max_queue` jobs already: the caller should answer 503 and let the client retry."""


@dataclass
class Job:
    key: Hashable
    items: list
    tokens: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    arrived: float = field(default_factory=time.monotonic)

    def abandoned(self) -> bool:
        return self.future.done()  # cancelled by a timeout or a disconnect

    def resolve(self, results: Sequence | None, error: BaseException | None) -> None:
        def settle() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(list(results))

        self.loop.call_soon_threadsafe(settle)


@dataclass
class Stats:
    """Counts since start: rounds the worker ran, hub calls, and jobs answered."""

    rounds: int = 0
    calls: int = 0
    jobs: int = 0


class Batcher:
    def __init__(self, run: Run, max_batch_tokens: int, max_wait_s: float, max_queue: int = 4096):
        self.run, self.max_batch_tokens, self.max_wait_s, self.max_queue = (
            run,
            max_batch_tokens,
            max_wait_s,
            max_queue,
        )
        self.stats = Stats()
        self._jobs: deque[Job] = deque()
        self._ready = threading.Condition()
        self._closing = False
        self._worker = threading.Thread(target=self._work, name="batcher", daemon=True)
        self._worker.start()

    def submit(self, key: Hashable, items: list, tokens: int) -> asyncio.Future:
        """Queue a job from the event loop; its future gets one result per item, in order."""
        loop = asyncio.get_running_loop()
        job = Job(key, items, tokens, loop.create_future(), loop)
        with self._ready:
            if self._closing:
                raise QueueFull("the server is shutting down")
            # Jobs whose callers stopped waiting give their places back before the queue is judged full.
            self._jobs = deque(j for j in self._jobs if not j.abandoned())
            if len(self._jobs) >= self.max_queue:
                raise QueueFull(f"{self.max_queue} requests are queued already; retry later")
            self._jobs.append(job)
            self._ready.notify()
        return job.future

    def close(self) -> None:
        """Finish every queued job, then stop the worker (graceful shutdown)."""
        with self._ready:
            self._closing = True
            self._ready.notify()
        self._worker.join()

    def _take(self) -> list[Job] | None:
        """The next round: what has arrived, up to the token budget; None once closed and empty."""
        with self._ready:
            while not self._jobs and not self._closing:
                self._ready.wait()
            if not self._jobs:
                return None
            deadline = self._jobs[0].arrived + self.max_wait_s
            while (
                sum(j.tokens for j in self._jobs) < self.max_batch_tokens
                and not self._closing
                and (left := deadline - time.monotonic()) > 0
            ):
                self._ready.wait(left)
            taken, budget = [], self.max_batch_tokens
            while self._jobs and (not taken or self._jobs[0].tokens <= budget):
                job = self._jobs.popleft()
                if not job.abandoned():
                    taken.append(job)
                    budget -= job.tokens
            return taken

    def _work(self) -> None:
        while (jobs := self._take()) is not None:
            if not jobs:  # every job taken had been abandoned
                continue
            self.stats.rounds += 1
            groups: dict[Hashable, list[Job]] = {}
            for job in jobs:
                groups.setdefault(job.key, []).append(job)
            for key, group in groups.items():
                self._run_group(key, [j for j in group if not j.abandoned()])

    def _run_group(self, key: Hashable, jobs: list[Job]) -> None:
        if not jobs:
            return
        items = [item for job in jobs for item in job.items]
        try:
            results = list(self.run(key, items))
        except Exception as e:  # noqa: BLE001 - handed to the waiting requests, never kills the worker
            if len(jobs) > 1:
                # Requests are checked one by one before they queue; should one still fail the shared
                # call, each runs alone, so that only its own request gets the error.
                for job in jobs:
                    self._run_group(key, [job])
                return
            jobs[0].resolve(None, e)
        else:
            start = 0
            for job in jobs:
                job.resolve(results[start : start + len(job.items)], None)
                start += len(job.items)
        self.stats.calls += 1
        self.stats.jobs += len(jobs)
