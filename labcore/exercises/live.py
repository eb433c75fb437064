"""Live checks: the learner's code on the ranks of several world sizes, timed alone.

A live check runs the learner's code on every rank of a cluster and looks at what came back. Two
things make it fair:

- **several world sizes.** The learner's cluster (4 ranks in the notebooks) and clusters of 3
  and 5 ranks besides (:data:`OTHER_SIZES`), started once and shared by every check (they are
  ``%%ranks 3`` and ``%%ranks 5``'s clusters, ``labcore.live.magic.get_cluster``), so code that
  assumes 4 ranks, or a buffer that divides evenly, is found out;
- **the time limit counts only the learner's code.** Before the learner's call on a cluster,
  :func:`warm_up` runs the check's on-rank harness once with the lab's own answer, after every
  fresh start of the ranks, under the start-up's generous timeout: that pays for the imports,
  the process group's first connections and the profiler's first start. The learner's call that
  follows is timed on what their code does (and the harness's milliseconds around it).

:class:`LiveExercise` is the exercise whose ``time_limit`` is that call's timeout on the ranks.

Example
-------
>>> import labcore as lc                                               # doctest: +SKIP
>>> with lc.Cluster(4, backend="gloo") as cl:                          # doctest: +SKIP
...     for n, each in on_every_size(cl, 4, lambda c: c.world_size):
...         print(n, each)
4 4
3 3
5 5
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

from labcore.exercises.core import CheckCouldNotRun, CustomExercise, Incorrect

__all__ = ["OTHER_SIZES", "LiveExercise", "clusters", "warm_up", "on_every_size", "class_with"]

OTHER_SIZES = (3, 5)        # world sizes every live check also runs at, besides the learner's cluster
WARM_UP_TIMEOUT_S = 180.0   # the lab's own first call on fresh ranks: imports and first connections
LIMIT_S = 30.0              # what the learner's code may take on the ranks, per call

_warmed: dict[int, tuple[tuple[int, ...], frozenset]] = {}     # id(cluster) -> (its ranks' pids, harnesses)


def clusters(cluster=None, world_size: int = 4) -> list:
    """The learner's cluster (or ``%%ranks world_size``'s), then the shared clusters of the other sizes."""
    from labcore.live.errors import ClusterError
    from labcore.live.magic import get_cluster

    try:
        main = cluster if cluster is not None else get_cluster(world_size)
        backend = "gloo" if main.backend == "gloo" else "auto"
        return [main] + [get_cluster(n, backend=backend) for n in OTHER_SIZES if n != main.world_size]
    except ClusterError as err:
        raise CheckCouldNotRun(f"the check's ranks could not start: {err}") from None


def _alive(cluster) -> bool:
    import psutil

    pids = cluster.pids
    return bool(pids) and all(psutil.pid_exists(p) for p in pids)


def warm_up(cluster, harness: Callable, *args) -> None:
    """Run ``harness(*args)`` (the lab's own answer) on ``cluster``'s ranks unless these ranks have
    run it already; its output is not shown. A failure is the lab's: :class:`CheckCouldNotRun`."""
    from labcore.live.errors import ClusterError

    key = f"{harness.__module__}.{harness.__qualname__}"
    pids, done = _warmed.get(id(cluster), ((), frozenset()))
    if _alive(cluster) and tuple(cluster.pids) == pids and key in done:
        return
    shown, cluster.show_output = cluster.show_output, False
    try:
        cluster.call(harness, args=args, timeout=WARM_UP_TIMEOUT_S)
    except ClusterError as err:
        raise CheckCouldNotRun(f"the lab's own answer failed on {cluster.world_size} ranks: {err}") from None
    finally:
        cluster.show_output = shown
    if tuple(cluster.pids) != pids:
        done = frozenset()
    _warmed[id(cluster)] = (tuple(cluster.pids), done | {key})


def on_every_size(cluster, world_size: int, check_one: Callable[[Any], Any]) -> Iterator[tuple[int, Any]]:
    """``check_one(cl)`` on the learner's cluster, then on each other size's; yields ``(n, result)``.

    An :class:`Incorrect` from a size after the first says that the code passed on the sizes
    before and names the size it failed on."""
    passed = []
    for cl in clusters(cluster, world_size):
        shown = cl.show_output
        cl.show_output = shown and not passed          # the learner's own cluster shows what the ranks print
        try:
            yield cl.world_size, check_one(cl)
        except Incorrect as wrong:
            if not passed:
                raise
            raise Incorrect(f"your code passed on {' and '.join(map(str, passed))} ranks, but on {cl.world_size} "
                            f"ranks: {wrong}") from None
        finally:
            cl.show_output = shown
        passed.append(cl.world_size)


def class_with(answer, *methods: str) -> bool:
    """Whether ``answer`` is a class that has ``methods``: a class here (asked as the learner's code), or
    one handed in as source to the grader (read from its source, not run: it is defined on the ranks)."""
    from labcore.exercises.codec import Sourced
    from labcore.exercises.timing import learner_code

    if type(answer) is Sourced:
        import ast

        try:
            tree = ast.parse(answer.source)
        except SyntaxError:
            return False
        body = next((n.body for n in tree.body if isinstance(n, ast.ClassDef)), [])
        defined = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        return answer.kind == "class" and set(methods) <= defined
    return issubclass(type(answer), type) and all(learner_code(hasattr, answer, m) for m in methods)


class LiveExercise(CustomExercise):
    """An exercise whose check runs the learner's code on live ranks.

    ``time_limit`` (30 s) is the timeout of each call of the learner's code on the ranks, given to
    the checker as ``timeout`` unless the caller passes one (``q.check(f, timeout=60)``).
    """

    expects = "a function"

    def __init__(self, title: str, prompt: str, *, time_limit: float | None = LIMIT_S, **kwargs: Any):
        super().__init__(title, prompt, time_limit=time_limit, **kwargs)

    def _runs_apart(self, answer: Any) -> bool:
        return False            # the learner's code runs on the ranks, which a call's timeout replaces

    def _check(self, answer: Any, **context: Any) -> str | None:
        if self.time_limit is not None:
            context.setdefault("timeout", self.time_limit)
        return self.checker(answer, **context)
