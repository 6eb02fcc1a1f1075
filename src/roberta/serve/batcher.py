"""The dynamic batcher: requests queue, one worker thread takes what has arrived and runs it together.

A request is a `Job`: a key (what to run: the endpoint and the options that must be equal within
one hub call, e.g. ("embed", layer, pool)), its items (texts or token ids) and each one's tokens.
The worker takes every job that has arrived, up to `max_batch_tokens` tokens, waiting up to
`max_wait` for more only when fewer have arrived; jobs that arrive while it runs form the next
round, so under load batches grow by themselves and an idle server runs a request at once (the
continuous batching of text-embeddings-inference). Jobs of one key run as one call of `run`
(the hub's list call, which sorts by length and pads per batch), and each job gets its own
slice of the results back, in order.

The worker is a thread, not a coroutine: a forward pass holds no GIL for its matrix products, so
the event loop keeps parsing requests while the model runs. A job whose caller stopped waiting
(timeout, disconnect) is dropped before it runs, freeing its place in the queue; once running, a
round's items go to `run` in length-sorted slices of at most `max_batch_tokens` padded tokens
(one forward pass each, the hub's own batching), and an abandoned job's items are dropped from
the slices not yet run. So a request that timed out costs at most the forward pass in progress.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from roberta.runtime.batching import length_batches

# What the worker calls: (key, every item of the round's jobs with that key) -> one result per item.
Run = Callable[[Hashable, list], Sequence]
# What it reports after each `run` call that succeeded (the metrics): its items' lengths in tokens.
OnBatch = Callable[[list[int]], None]


class QueueFull(Exception):
    """The queue holds `max_queue` jobs already: the caller should answer 503 and let the client retry."""


@dataclass
class Job:
    key: Hashable
    items: list
    lengths: list[int]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    arrived: float = field(default_factory=time.monotonic)

    @property
    def tokens(self) -> int:
        return sum(self.lengths)

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
    def __init__(
        self,
        run: Run,
        max_batch_tokens: int,
        max_wait_s: float,
        max_queue: int = 4096,
        on_batch: OnBatch = lambda lengths: None,
    ):
        self.run, self.max_batch_tokens, self.max_wait_s, self.max_queue = (
            run,
            max_batch_tokens,
            max_wait_s,
            max_queue,
        )
        self.on_batch = on_batch
        self.stats = Stats()
        self._jobs: deque[Job] = deque()
        self._ready = threading.Condition()
        self._closing = False
        self._worker = threading.Thread(target=self._work, name="batcher", daemon=True)
        self._worker.start()

    def submit(self, key: Hashable, items: list, lengths: list[int]) -> asyncio.Future:
        """Queue a job from the event loop (`lengths`: each item's tokens); its future gets one
        result per item, in order."""
        loop = asyncio.get_running_loop()
        job = Job(key, items, lengths, loop.create_future(), loop)
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

    def queued(self) -> int:
        """Jobs waiting for the worker (those whose callers stopped waiting count until it drops them)."""
        return len(self._jobs)

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
        """`jobs`' items through `run` a forward pass's worth at a time, each job answered once its
        last item has run; the items of a job abandoned meanwhile are not run."""
        places = [(job, i) for job in jobs for i in range(len(job.items))]
        results = {id(job): [None] * len(job.items) for job in jobs}
        left = {id(job): len(job.items) for job in jobs}
        failed: set[int] = set()
        for batch in length_batches([job.lengths[i] for job, i in places], self.max_batch_tokens):
            batch = [places[p] for p in batch if id(places[p][0]) not in failed]
            batch = [(job, i) for job, i in batch if not job.abandoned()]
            if not batch:
                continue
            for job, error in self._run_slice(key, batch, results):
                failed.add(id(job))
                job.resolve(None, error)
            for job, _ in batch:
                left[id(job)] -= 1
                if left[id(job)] == 0 and id(job) not in failed:
                    job.resolve(results[id(job)], None)
                    self.stats.jobs += 1

    def _run_slice(self, key: Hashable, batch: list[tuple[Job, int]], results: dict) -> list:
        """One `run` call over `batch`'s items, results stored by job; the (job, error) pairs of
        jobs that failed it."""
        try:
            out = list(self.run(key, [job.items[i] for job, i in batch]))
        except Exception as e:  # noqa: BLE001 - handed to the waiting requests, never kills the worker
            jobs = list({id(job): job for job, _ in batch}.values())
            if len(jobs) == 1:
                return [(jobs[0], e)]
            # Requests are checked one by one before they queue; should one still fail the shared
            # call, each runs alone, so that only its own request gets the error.
            return [
                f for job in jobs for f in self._run_slice(key, [p for p in batch if p[0] is job], results)
            ]
        self.stats.calls += 1
        self.on_batch([job.lengths[i] for job, i in batch])
        for (job, i), result in zip(batch, out):
            results[id(job)][i] = result
        return []
