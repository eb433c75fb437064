"""Exercises for notebook 02, the ring all-reduce, split by audience:

- :mod:`.reference`: the code a learner reads: :func:`ring_all_reduce` (the reference ring
  written with isend/irecv, beside ``dist.all_reduce``), :func:`ring_steps` and
  :func:`simulate_steps` (a learner's schedule run in the simulator, ready to animate);
- :mod:`.questions`: the exercises: :data:`q_ring_bytes` (bytes each rank sends),
  :data:`q_send_chunk` (which chunk a rank sends at a reduce-scatter step),
  :data:`q_ring_schedule` (the whole schedule, verified by the simulator), :data:`q_ring_live`
  (a ring with send/recv on the live cluster: its result checked against ``dist.all_reduce``, its
  recorded traffic against a ring's: neighbours only, 2(n-1)/n x S bytes per rank, no
  collective), :data:`q_busbw` (busbw from a measured time);
- :mod:`.checks`: their checks; :mod:`.mistakes`: rings that are not, for the tests.

Example
-------
>>> q_ring_bytes.check(lambda nbytes, ranks: 2 * (ranks - 1) / ranks * nbytes)
Bytes per rank: correct! (4 cases passed)
"""
from labcore.exercises.ring import checks as checks
from labcore.exercises.ring import questions as questions
from labcore.exercises.ring import reference as reference
from labcore.exercises.ring.checks import CollectiveSwitchedOff
from labcore.exercises.ring.questions import q_busbw, q_ring_bytes, q_ring_live, q_ring_schedule, q_send_chunk
from labcore.exercises.ring.reference import ring_all_reduce, ring_convention, ring_steps, simulate_steps

__all__ = ["q_ring_bytes", "q_send_chunk", "q_ring_schedule", "q_ring_live", "q_busbw",
           "ring_all_reduce", "ring_steps", "simulate_steps", "ring_convention", "CollectiveSwitchedOff"]
