"""The lab's cluster on ipyparallel engines: ranks on several machines, driven from one notebook.

:class:`labcore.Cluster` forks its ranks on the notebook's machine. Past one
machine the ranks must be processes someone else starts: ipyparallel's engines,
with its own launchers (local, SSH, MPI, SLURM). :class:`EngineCluster` makes
one rank of each engine and offers the same calls as ``Cluster`` (``run``,
``call``, ``exec``, ``pull``, ``push``, ``%%ranks --on``), so the recorder and
``lc.bench.sweep`` work on it unchanged.

Rendezvous: engine 0 opens a TCPStore on the address of the network interface
the user names (default loopback, which only joins engines on one host), and
every engine joins the process group through it, with gloo's and NCCL's
sockets bound to the same interface (``GLOO_SOCKET_IFNAME``,
``NCCL_SOCKET_IFNAME``). A named interface exposes the store's port and the
backend's ports to every host on that network, with no authentication: see
docs/slurm.md.

Faults are reported the way ``Cluster`` reports them (``RankError`` naming the
rank with its traceback, ``RankDied`` naming the rank whose engine died,
``CollectiveTimeout`` with a hang report of where each stuck rank is), and the
next call gets a fresh group through the same restart path
(labcore.live.base): a new process group on the same engines when they all
answer, fresh engines when one died or is stuck. Closing a cluster that started
its engines returns once every engine, nanny and controller process of it on
this host is gone, with their temp files.
"""
from __future__ import annotations

import concurrent.futures
import logging
import os
import signal
import socket
import sys
import time
import weakref

from labcore.live import engine_rank, hang, scratch, source, subreaper
from labcore.live.base import ERROR_GRACE_S, HANG_REPORT_S, RankGroupBase, check_timeout
from labcore.live.errors import ClusterError, CollectiveTimeout, RankDied, RankError
from labcore.live.hang import HangReport
from labcore.live.settings import check_env, check_output_limit
from labcore.live.sysinfo import LIMIT_ENV, check_world_size

_TEARDOWN_S = 10.0          # leaving the process group on close; the cluster's processes ending
_KILL_WAIT_S = 5.0          # SIGKILLed processes being gone
_POLL_S = 0.1               # how often a call looks for engines that died


def _loopback(interface: str) -> bool:
    return interface == "lo" or interface.startswith("lo0")


def _check_interface_here(interface) -> None:
    import psutil

    if not isinstance(interface, str) or not interface:
        raise ValueError(f"interface must name a network interface (e.g. 'lo', 'eth0', 'ib0'), not {interface!r}")
    names = sorted(psutil.net_if_addrs())
    if interface not in names:
        raise ValueError(f"this machine has no network interface {interface!r}; it has {', '.join(names)}")


def _check_launcher(launcher) -> None:
    """A launcher ipyparallel knows: one of its entry points' names, a launcher class or a dotted path."""
    if isinstance(launcher, type) or (isinstance(launcher, str) and "." in launcher):
        return
    from importlib.metadata import entry_points

    names = sorted(e.name for e in entry_points(group="ipyparallel.engine_launchers"))
    if not isinstance(launcher, str) or launcher.lower() not in names:
        raise ValueError(f"launcher must name one of ipyparallel's engine launchers ({', '.join(names)}), "
                         f"not {launcher!r}")


def _alive(pid: int, started: float | None = None) -> bool:
    """Whether ``pid`` runs (a zombie has ended; a later process that reused the pid does not count)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        return (proc.status() != psutil.STATUS_ZOMBIE
                and (started is None or abs(proc.create_time() - started) < 1.0))
    except psutil.Error:
        return False


def _controller_pid(cluster) -> int | None:
    process = getattr(getattr(cluster, "controller", None), "process", None)
    return getattr(process, "pid", None)


def _local_processes(engines: list, cluster=None) -> list:
    """The processes on this host of ``engines`` ((pid, start time) pairs) and of ``cluster``'s
    controller, with everything they started: nannies, and daemons the engines adopted."""
    import psutil

    roots = list(engines)
    if _controller_pid(cluster) is not None:
        roots.append((_controller_pid(cluster), None))
    found = []
    for pid, started in roots:
        if not _alive(pid, started):
            continue
        try:
            found.append(psutil.Process(pid))
        except psutil.Error:
            continue
        found += subreaper.descendants(pid)
    return found


def _kill(procs: list) -> None:
    import psutil

    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass


def _reap(procs: list) -> None:
    """Collect the exit status of those of ``procs`` that are this process's children (local
    engines are), so that none stays a zombie once its launcher stopped waiting for it."""
    for proc in procs:
        try:
            os.waitpid(proc.pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass   # not a child of ours, or reaped already


def _wait_gone(procs: list, wait_s: float) -> list:
    """Wait up to ``wait_s`` for ``procs`` to end, SIGKILL what is left and wait again; the survivors."""
    def left():
        _reap(procs)
        return [p for p in procs if p.is_running() and _alive(p.pid)]

    deadline = time.monotonic() + wait_s
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    _kill(left())
    deadline = time.monotonic() + _KILL_WAIT_S
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    return left()


def _stop_owned(state: dict) -> None:
    """Stop an owned ipyparallel cluster; return when its processes on this host are gone (the
    engines' trees at once: their ranks are torn down or past saving), its folder removed.
    Also run at interpreter exit."""
    client, cluster, run_dir = state.pop("client", None), state.pop("cluster", None), state.pop("run_dir", None)
    engines = state.pop("engines", [])
    procs = _local_processes(engines, cluster)
    controller = _controller_pid(cluster)
    _kill([p for p in procs if p.pid != controller])
    if client is not None:
        client.close()
    if cluster is not None:
        try:
            cluster.stop_cluster_sync()
        except Exception:  # already gone: nothing left to stop
            pass
    _wait_gone(procs, _TEARDOWN_S)
    if run_dir:
        scratch.remove(run_dir)


class EngineCluster(RankGroupBase):
    """One rank per ipyparallel engine, torch.distributed across them, ``Cluster``'s calls.

    Parameters
    ----------
    engines : int, ipyparallel.Cluster or ipyparallel.Client
        An int starts that many engines with ipyparallel's ``launcher`` and stops them
        on :meth:`close`. An ``ipp.Cluster`` that is not running yet is started and
        stopped the same way; a running one (or a ``Client`` of one) is used as it is,
        and only its process group is torn down on close.
    backend : {"auto", "gloo", "nccl"}
        "auto" picks NCCL when every engine's host has a GPU for each of its engines.
    timeout : float
        Seconds a call may take on every rank before it is reported as a hang.
    interface : str
        The network interface the ranks meet on: ``"lo"`` (default) for engines on
        this machine, the fabric between hosts otherwise (``"eth0"``, ``"ib0"``, ...).
    env : dict, optional
        Environment variables set on every engine before the process group is made.
    show_output : bool
        Print each rank's output after a call, prefixed ``[rank r]``, in rank order.
    output_limit : int
        Bytes of each rank's stdout (and stderr) kept per call: the head and the tail.
    launcher : str
        ipyparallel's engine launcher when ``engines`` is an int: "local", "mpi",
        "slurm", "ssh", ... (its ``engines=`` argument).
    start_timeout : float
        Seconds to wait for engines to start and join.
    **cluster_options
        Passed to ``ipp.Cluster`` when it is created here (e.g. ``controller_ip``).

    Examples
    --------
    >>> import labcore as lc
    >>> def total():
    ...     import torch, torch.distributed as dist
    ...     t = torch.tensor([lc.rank_info().rank + 1])
    ...     dist.all_reduce(t)
    ...     return t.item()
    >>> with lc.EngineCluster(2) as cl:          # doctest: +SKIP
    ...     cl.run(total)
    [3, 3]
    """

    def __init__(self, engines=2, *, backend: str = "auto", timeout: float = 60.0, interface: str = "lo",
                 env: dict | None = None, show_output: bool = True, output_limit: int = 4 << 20,
                 launcher: str = "local", start_timeout: float = 120.0, **cluster_options):
        try:
            import ipyparallel as ipp
        except ImportError:
            raise ImportError("EngineCluster runs on ipyparallel engines: pip install ipyparallel "
                              "(it comes with labcore's lab extra)") from None
        if backend not in ("auto", "gloo", "nccl"):
            raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', not {backend!r}")
        self._init_base(timeout)
        self._start_timeout = check_timeout(start_timeout, "start_timeout")
        check_output_limit(output_limit)
        env = check_env(env)
        if isinstance(engines, bool) or not isinstance(engines, (int, ipp.Cluster, ipp.Client)):
            raise TypeError("engines must be a number of engines to start, an ipyparallel.Cluster or an "
                            f"ipyparallel.Client, not {type(engines).__name__}")
        if isinstance(engines, int) and engines < 1:
            raise ValueError(f"engines must be at least 1, not {engines}")
        if not isinstance(interface, str) or not interface:
            raise ValueError(f"interface must name a network interface (e.g. 'lo', 'eth0', 'ib0'), not {interface!r}")
        if isinstance(engines, int):
            _check_launcher(launcher)
        if isinstance(engines, int) and launcher == "local":
            _check_interface_here(interface)
            # local engines are processes on this machine, held to the limit a Cluster has
            check_world_size(engines, "nccl" if backend == "nccl" else "gloo",
                             override=f"{LIMIT_ENV}={engines} in the environment")
        self.interface = interface
        self.env = env
        self.show_output = show_output
        self.output_limit = output_limit
        self._requested_backend = backend
        self.backend: str | None = None
        self.hosts: list[str] = []
        self._generation = 0
        self._ranks: list[int] = []      # engine id of every rank
        self._pids: list[int] = []
        self._pgids: list[int] = []
        self._started: list[float] = []
        self._nannies: list[int] = []
        self._owned: dict = {}           # what close() must stop: client, cluster, run folder
        self._finalizer = None
        self._ready = False
        self._stuck = False              # a rank did not answer: its engine must be restarted
        self._want = None
        self._launcher, self._cluster_options = launcher, dict(cluster_options)
        scratch.remove_orphans()
        if isinstance(engines, int):
            self._want = engines
            self._make_owned(engines, launcher, cluster_options)
        elif isinstance(engines, ipp.Cluster):
            self._ipp = engines
            # a started cluster knows how many engines it launched: wait for them all to register
            self._want = sum(getattr(s, "n", 0) or 0 for s in engines.engines.values()) or engines.n
            if engines.controller is None:
                self._owned = {"cluster": engines}
                self._finalizer = weakref.finalize(self, _stop_owned, self._owned)
            self._client = None
        else:
            self._ipp, self._client = getattr(engines, "cluster", None), engines
        self._start()

    _name = "lc.EngineCluster"

    # -- lifecycle -------------------------------------------------------------------------
    def _make_owned(self, n: int, launcher: str, options: dict) -> None:
        import ipyparallel as ipp

        run_dir = scratch.make_run_dir()   # the profile: connection files and logs go when we go
        # ipyparallel logs an engine's whole output as a warning when it exits with a nonzero
        # code, as every engine a close() ends does; its errors still show
        options.setdefault("log_level", logging.ERROR)
        try:
            self._ipp = ipp.Cluster(n=n, engines=launcher, profile_dir=run_dir, delay=0.1, **options)
        except Exception as exc:
            scratch.remove(run_dir)
            raise ValueError(f"ipyparallel refused these cluster options ({type(exc).__name__}: {exc}); "
                             "check launcher= and the keyword arguments passed on to ipp.Cluster") from None
        self._client = None
        self._owned = {"cluster": self._ipp, "run_dir": run_dir}
        self._finalizer = weakref.finalize(self, _stop_owned, self._owned)

    def _start(self) -> None:
        """A group of ranks: on fresh engines where a rank died or is stuck, else on the same ones."""
        if self._client is None:
            if not self._owned and self._want:
                self._make_owned(self._want, self._launcher, dict(self._cluster_options))
            self._start_engines()
            return
        try:
            if self._stuck or self._dead_ranks():
                self._restart_engines()
            else:
                self._join(self._ranks)
        except ClusterError:
            raise
        except Exception as exc:
            raise ClusterError(f"the engines could not restart: {type(exc).__name__}: {exc}") from None

    def _start_engines(self) -> None:
        """Start (or reach) the engines, then make one rank of each."""
        try:
            if self._ipp is not None and self._ipp.controller is None and "cluster" in self._owned:
                self._ipp.start_cluster_sync()
            if self._client is None:
                self._client = self._ipp.connect_client_sync()
                if self._owned:
                    self._owned["client"] = self._client
            if self._want:
                self._client.wait_for_engines(self._want, timeout=self._start_timeout, interactive=False)
            self._join(sorted(self._client.ids))
        except (ValueError, TypeError):
            self._stop_owned_now()
            raise
        except ClusterError:
            raise
        except Exception as exc:
            raise ClusterError(f"the engines could not start or join: {type(exc).__name__}: {exc}") from None

    def _stop_owned_now(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None

    def _apply(self, engine_id: int, fn, *args):
        return self._client[engine_id].apply_async(fn, *args)

    def _gather(self, futures: list, what: str, timeout: float) -> list:
        done, pending = concurrent.futures.wait(futures, timeout=timeout)
        if pending:
            late = [r for r, f in enumerate(futures) if f in pending]
            raise ClusterError(f"{what}: no answer from rank(s) {late} within {timeout:g} s")
        results = []
        for rank, f in enumerate(futures):
            try:
                results.append(f.get())
            except Exception as exc:
                raise ClusterError(f"{what} failed on rank {rank}: {exc}") from None
        return results

    def _join(self, ids: list[int]) -> None:
        if not ids:
            raise ClusterError("no engines are registered with this ipyparallel cluster; start some first")
        facts = self._gather([self._apply(e, engine_rank.probe, self.interface) for e in ids],
                             "asking the engines about their hosts", self._start_timeout)
        self.backend = self._choose_backend(facts)
        hosts = [f["host"] for f in facts]
        local = [hosts[:r].count(h) for r, h in enumerate(hosts)]
        per_host = {h: hosts.count(h) for h in hosts}
        self._generation += 1
        address = facts[0]["address"]
        port = self._gather([self._apply(ids[0], engine_rank.open_store, address, self._start_timeout)],
                            "opening the rendezvous store on rank 0", self._start_timeout)[0]
        lifeline = self._lifeline(facts) if self._owned.get("run_dir") else None
        joins = [self._apply(e, engine_rank.init, r, len(ids), local[r],
                             max(1, facts[r]["cpus"] // per_host[hosts[r]]), self.backend, address, port,
                             self._generation, self.interface, self._timeout, self.env, lifeline, list(sys.path),
                             self._owned.get("run_dir"))
                 for r, e in enumerate(ids)]
        self._gather(joins, f"init_process_group over {self.interface} ({address}:{port})", self._start_timeout)
        self._ranks, self._pids, self.hosts = ids, [f["pid"] for f in facts], hosts
        self._pgids, self._started = [f["pgid"] for f in facts], [f["started"] for f in facts]
        self._nannies = [n for f in facts if f["host"] == socket.gethostname() for n in f["nannies"]]
        if self._owned:   # what close() waits for, also at interpreter exit
            self._owned["engines"] = self._here()
        self._fault, self._ready, self._stuck = None, True, False
        if not _loopback(self.interface):
            print(f"labcore: {len(ids)} ranks on {len(per_host)} host(s) meet at {address}:{port} on "
                  f"{self.interface}; anyone on that network can reach these ports.", file=sys.stderr, flush=True)

    def _choose_backend(self, facts: list[dict]) -> str:
        missing = [f"{f['host']} has no interface {self.interface!r} (it has {', '.join(f['interfaces'])})"
                   for f in facts if f["address"] is None]
        if missing:
            raise ValueError("; ".join(sorted(set(missing))) + ". Pass interface= one that every engine's host has.")
        hosts = sorted({f["host"] for f in facts})
        if len(hosts) > 1 and facts[0]["address"].startswith("127."):
            raise ValueError(f"the engines run on {len(hosts)} hosts ({', '.join(hosts)}), which loopback cannot "
                             "join: pass interface= the network between them, e.g. interface='eth0' or 'ib0'")
        short = [f["host"] for f in facts
                 if not f["nccl"] or f["gpus"] < sum(g["host"] == f["host"] for g in facts)]
        if self._requested_backend == "nccl" and short:
            raise ValueError(f"backend='nccl' needs one GPU per engine, but {sorted(set(short))[0]} has too few "
                             "(or no NCCL): use backend='gloo' or 'auto'")
        if self._requested_backend == "gloo" or short:
            return "gloo"
        return "nccl"

    def _lifeline(self, facts: list[dict]) -> dict:
        """What engines on this host need to follow the notebook: its pid, and the controller to end too."""
        import psutil

        reap = []
        controller = getattr(getattr(self._ipp, "controller", None), "process", None)
        if controller is not None:
            reap.append((controller.pid, psutil.Process(controller.pid).create_time()))
        return {"host": socket.gethostname(), "pid": os.getpid(), "started": psutil.Process().create_time(),
                "reap": reap, "run_dir": self._owned.get("run_dir")}

    def _restart_engines(self) -> None:
        """Replace stuck engines: kill them, start as many again, make ranks of the new ones."""
        if self._ipp is None or not self._ipp.engines:
            raise ClusterError("a rank is stuck and this ipyparallel cluster cannot restart its engines from here "
                               "(it was passed as a Client without its Cluster): restart them yourself "
                               "(ipcluster engines), or pass the ipp.Cluster")
        old = set(self._client.ids)
        n = len(self._ranks) or self._want
        self._kill_local()
        try:   # engines on other hosts, through their launcher (those here are gone already)
            self._ipp.signal_engines_sync(signal.SIGKILL)
        except Exception:
            pass
        self._ipp.restart_engines_sync()
        deadline = time.monotonic() + self._start_timeout
        while True:
            fresh = sorted(set(self._client.ids) - old)
            if len(fresh) >= n:
                break
            if time.monotonic() > deadline:
                raise ClusterError(f"only {len(fresh)} of {n} engines came back within {self._start_timeout:g} s")
            time.sleep(0.1)
        self._join(fresh[:n])

    def _here(self) -> list[tuple[int, float]]:
        """(pid, start time) of the ranks' engines on this host."""
        here = socket.gethostname()
        return [(pid, started) for host, pid, started in zip(self.hosts, self._pids, self._started) if host == here]

    def _kill_local(self) -> None:
        """SIGKILL the ranks' engines on this host with all they started: the process group each
        leads (ipyparallel's local launcher starts each in a session of its own), and what left
        it (daemons the engine adopted, its nanny)."""
        procs = []
        for pid, started in self._here():
            tree = _local_processes([(pid, started)])   # empty once the engine is gone
            try:
                if tree and os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            procs += tree
        _kill(procs)
        _wait_gone(procs, _KILL_WAIT_S)

    # -- life cycle: RankGroupBase's restart path -----------------------------------------
    def _running(self) -> bool:
        return self._ready

    def _dead_ranks(self, ranks=None) -> list[int]:
        """Ranks whose engine is gone: its process on this host ended, or the controller has
        unregistered it (its nanny reported its death)."""
        registered = set(self._client.ids) if self._client is not None else set()
        here = socket.gethostname()
        dead = []
        for r in (range(len(self._ranks)) if ranks is None else ranks):
            gone = (self._ranks[r] not in registered
                    or (self.hosts[r] == here and not _alive(self._pids[r], self._started[r])))
            if gone:
                dead.append(r)
        return dead

    def _discard(self) -> None:
        self._ready = False

    def _close_now(self) -> None:
        """Leave the process group (ending what the ranks started); stop the engines this cluster
        started and return when they, their nannies and the controller are gone."""
        if self._client is not None and self._ready and not self._stuck:
            try:
                self._gather([self._apply(e, engine_rank.teardown, True) for e in self._ranks],
                             "leaving the group", _TEARDOWN_S)
                self._apply(self._ranks[0], engine_rank.close_store).get(_TEARDOWN_S)
            except Exception:
                pass  # engines we stop below go anyway; a shared cluster's engines may be gone already
        if self._owned:
            self._stop_owned_now()
            self._owned, self._client = {}, None
        self._ready, self._fault, self._stuck = False, None, False

    @property
    def world_size(self) -> int:
        return len(self._ranks)

    @property
    def pids(self) -> list[int]:
        """Process ids of the engines, in rank order (each on its own host)."""
        return list(self._pids) if self._ready else []

    def __repr__(self) -> str:
        state = "closed" if self.closed else (f"restarting: {self._fault}" if self._fault else "running")
        hosts = len(set(self.hosts))
        return (f"EngineCluster(world_size={self.world_size}, backend={self.backend!r}, {hosts} host(s), "
                f"interface={self.interface!r}, {state})")

    # -- calls: RankGroupBase checks them and keeps them one at a time ---------------------
    def _send(self, kind: str, payload: bytes, timeout: float) -> list:
        futures = [self._apply(e, engine_rank.call, self._request_id, kind, payload, timeout,
                               self.output_limit) for e in self._ranks]
        return self._collect(self._request_id, futures, timeout)

    def _collect(self, request_id: int, futures: list, timeout: float) -> list:
        """Every rank's reply to ``request_id``; anything short of a clean set replaces the group.

        A rank whose engine died is named as such (``RankDied``), also when another rank's
        collective failed first because of it ("Connection closed by peer"), as ``Cluster`` does.
        """
        n = len(futures)
        replies: dict[int, tuple] = {}
        errors: dict = {}
        outputs = [("", "")] * n
        deadline = time.monotonic() + timeout
        clean = False
        try:
            while len(replies) < n:
                remaining = deadline - time.monotonic()
                pending = [r for r in range(n) if r not in replies]
                self._find_dead(pending, outputs)
                if remaining <= 0:
                    if errors:
                        break
                    self._emit(outputs)
                    self._hang(timeout, futures, sorted(replies))
                done, _ = concurrent.futures.wait([futures[r] for r in pending], timeout=min(remaining, _POLL_S),
                                                  return_when=concurrent.futures.FIRST_COMPLETED)
                for rank in sorted(futures.index(f) for f in done):
                    self._receive(rank, futures[rank], request_id, replies, errors, outputs)
                    if errors:
                        deadline = min(deadline, time.monotonic() + ERROR_GRACE_S)
            self._find_dead(range(n) if errors else [], outputs)
            clean = len(replies) == n
        except KeyboardInterrupt:
            self._fault = "the previous call was interrupted"
            raise
        finally:
            if not clean:
                self._fault = self._fault or (f"rank {min(errors)} raised while other ranks waited" if errors
                                              else "the previous call did not finish")
                self._ready, self._stuck = False, True
        self._emit(outputs)
        lost = [r for r, reply in sorted(replies.items()) if reply[2]]
        if lost:
            self._fault = f"rank {lost[0]} {replies[lost[0]][2]}"
            self._discard()
        if errors:
            raise RankError(errors, restarted=not clean)
        return self._unpack_all(replies)

    def _find_dead(self, ranks, outputs: list) -> None:
        """Raise ``RankDied`` for the first of ``ranks`` whose engine is gone."""
        dead = self._dead_ranks(list(ranks))
        if dead:
            self._died(dead[0], outputs)

    def _died(self, rank: int, outputs: list):
        self._fault = f"rank {rank} died"
        self._ready, self._stuck = False, True
        self._emit(outputs)
        out, err = outputs[rank]
        raise RankDied(rank, None, out + err)

    def _receive(self, rank: int, future, request_id: int, replies: dict, errors: dict, outputs: list) -> None:
        from ipyparallel.error import EngineError

        try:
            message = future.get()
        except EngineError:
            self._died(rank, outputs)
        except Exception as exc:
            message = None
            errors[rank] = (type(exc).__name__, str(exc), str(exc))
        if not (isinstance(message, tuple) and len(message) == 7 and message[0] == request_id
                and message[1] == self._pids[rank]):
            if rank not in errors:
                errors[rank] = ("ClusterError", "the engine's reply did not answer this call", "")
            replies[rank] = ("error", b"", "gave a reply that did not answer this call")
            return
        _, _, status, body, problem, out, err = message   # problem: why the group must go ("" if it may stay)
        outputs[rank] = (out, err)
        replies[rank] = (status, body, problem)
        if status != "ok":
            name, text, tb = body
            errors[rank] = (name, text, source.restore_frames(tb, self._origins))

    def _hang(self, timeout: float, futures: list, finished: list[int]):
        stuck = [r for r in range(len(futures)) if r not in finished]
        until = time.monotonic() + HANG_REPORT_S
        while time.monotonic() < until and not all(engine_rank.STACK_KEY in futures[r].data for r in stuck):
            time.sleep(0.05)
        where = {}
        for r in stuck:
            dump = futures[r].data.get(engine_rank.STACK_KEY, "")
            where[r] = hang.summarize_stack(source.restore_frames(dump, self._origins))
        self._fault = "the previous call timed out"
        raise CollectiveTimeout(HangReport(timeout, finished, where))

    def _emit(self, outputs: list) -> None:
        self.last_output = list(outputs)
        self._show(outputs)
