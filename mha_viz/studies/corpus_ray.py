"""The corpus statistics on Ray: batches of texts to an actor pool whose workers each load the model once; their
partial sums come back in batch order and are added up exactly as the local engine adds its own (studies.corpus).

Ray is an optional extra (`pip install "mha-viz[ray]"` or requirements-ray.txt). Without ``address`` a local
cluster starts with ``workers`` processes; with it, the run joins an existing cluster (whose nodes need mha-viz and
the model installed). Each worker runs torch with one thread: the workers are the parallelism.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable

from mha_viz.errors import MhaVizError
from mha_viz.studies.corpus import Item, Scorer, Sums, added

WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MHA_VIZ_TORCH_THREADS": "1",
              "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip


def _ray():
    try:
        import ray
    except ImportError:
        raise MhaVizError('--engine ray needs Ray: pip install "mha-viz[ray]" (or -r requirements-ray.txt)') from None
    return ray


def run_ray(
    model: str, part: str | None, device: str, work: Iterable[list[Item]], sums: Sums | None,
    done: Callable[[Sums], None], workers: int = 2, address: str | None = None, options: dict | None = None,
) -> Sums | None:  # fmt: skip
    """Score the batches on ``workers`` Ray actors (at most two batches in flight per worker), adding the partial
    sums in batch order (then ``done(sums)`` after each: checkpoint, progress). ``options``: the Scorer's keyword
    arguments (batched, side, placement)."""
    ray = _ray()
    from ray.util import ActorPool

    started = not ray.is_initialized()
    saved = dict(os.environ)  # ray.init writes its own settings into this process's environment
    if started:
        kwargs = {"address": address} if address else {"num_cpus": workers, "include_dashboard": False}
        ray.init(**kwargs, runtime_env={"env_vars": WORKER_ENV}, log_to_driver=False, configure_logging=False)
    try:
        actor = ray.remote(num_cpus=1)(Scorer)
        pool = ActorPool([actor.remote(model, part, device, **(options or {})) for _ in range(workers)])
        work = iter(work)
        for batch in itertools.islice(work, 2 * workers):
            pool.submit(lambda a, b: a.score.remote(b), batch)
        while pool.has_next():
            try:
                partial = pool.get_next()  # in submission order: the same sums as the local engine
            except ray.exceptions.RayError as exc:  # a worker's failure (its model, its text), said in one line
                cause = getattr(exc, "cause", None) or exc
                raise MhaVizError(f"a Ray worker failed: {str(cause).strip().splitlines()[-1]}") from None
            sums = added(sums, partial)
            done(sums)
            batch = next(work, None)
            if batch is not None:
                pool.submit(lambda a, b: a.score.remote(b), batch)
    finally:
        if started:
            ray.shutdown()
            os.environ.clear()
            os.environ.update(saved)
    return sums
