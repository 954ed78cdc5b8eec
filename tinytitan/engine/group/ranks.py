"""One model served by several processes: the group MLX's distributed layer gives them (``mx.distributed``).

Rules:
- A process is one rank of a group when ``mlx.launch`` started it (it sets ``MLX_RANK`` and, for the ring
  backend, ``MLX_HOSTFILE``); ``Group.from_env()`` is None otherwise, and nothing here is imported.
- Rank 0 decides; the others follow (lockstep.py). What rank 0 decided travels by ``share(obj)``: a JSON value,
  broadcast through ``mx.distributed.all_sum`` (rank 0 contributes it, the others zeros): one collective of
  ``SHARE_BYTES`` holding its length and its start (a decode step's message fits), a second for any rest.
  The same sum carries the followers' word back: a byte each (``REPORT_BYTES``, zero on rank 0) that a
  follower sets when it diverged (lockstep.py), and rank 0 then breaks the group naming that rank.
- Every collective of a rank runs on one stream (``stream``): the model's own (a sharded layer's all_sum),
  the batch's and the broadcast. Collectives on two streams run in whichever order the streams reach them,
  and the ranks' orders then differ: the bytes of one land in another.
- The model is sharded by what it offers (``sharding``): tensor parallel where it has ``shard(group)``, else
  pipeline parallel (``model.model.pipeline(group)``), else it is refused by its model type; ``--sharding``
  may ask for one of the two (a model offering both). mlx-lm's ``sharded_load`` loads each rank's part.
- A collective that fails (a rank died: "[ring] connection to a peer was lost") breaks the group for good:
  ``broken`` says why and which rank, and a restart of the whole group is the recovery.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import Any

from ...errors import ApiError

log = logging.getLogger("tinytitan.group")

SHARE_BYTES = 2048  # one broadcast carries its length and this much of the message: a decode step's, whole
REPORT_BYTES = 8  # after the length: a byte each follower (ranks 1-8; 8: 8 or above) sets to say it diverged
HOST_BYTES = 64  # a rank's host name, as each rank reports it (truncated)


def launched() -> bool:
    """Whether this process was started as one rank of a group (``mlx.launch`` sets these)."""
    return "MLX_RANK" in os.environ


def backend_name() -> str:
    """The distributed backend the launcher chose, from what it set in the environment."""
    if os.environ.get("MLX_IBV_DEVICES") or os.environ.get("MLX_JACCL_COORDINATOR"):
        return "jaccl"
    if os.environ.get("MLX_HOSTFILE"):
        return "ring"
    if os.environ.get("OMPI_COMM_WORLD_RANK") is not None:
        return "mpi"
    return "any"


def sharding(model, want: str = "auto", size: int = 1) -> str:
    """How a model is split across ``size`` ranks: "tensor" (its ``shard``) or "pipeline" (``model.model.pipeline``).
    ``want`` "auto" takes tensor parallel where the model offers it and it splits evenly, else pipeline; a named
    one the model does not offer (or cannot split: unevenly, or by layers fewer than the ranks), or a model
    offering neither, is refused naming its type."""
    kind = getattr(getattr(model, "args", None), "model_type", None) or type(model).__module__.rsplit(".", 1)[-1]
    offers = [name for name, has in (("tensor", hasattr(model, "shard")),
                                     ("pipeline", hasattr(getattr(model, "model", None), "pipeline"))) if has]
    uneven = uneven_split(model, size) if "tensor" in offers else None
    layers = len(getattr(model.model, "layers", None) or ()) if "pipeline" in offers else 0
    few = "pipeline" in offers and 0 < layers < size  # mlx-lm's pipeline gives each rank at least one layer
    if want == "auto" and offers:
        want = "tensor" if "tensor" in offers and (uneven is None or "pipeline" not in offers or few) else "pipeline"
    if want == "tensor" and uneven is not None:
        other = (f" (nor can pipeline parallelism: it has {layers} layers)" if few else
                 " (--sharding pipeline can serve it)" if "pipeline" in offers else "")
        raise Unshardable(f"the model type '{kind}' cannot be split by tensor parallelism across {size} ranks: its "
                          f"{uneven} do not divide among them (mlx-lm's shard gives each rank an equal part){other}")
    if want == "pipeline" and few:
        raise Unshardable(f"the model type '{kind}' cannot be split by pipeline parallelism across {size} ranks: it "
                          f"has {layers} layers (mlx-lm's pipeline gives each rank at least one)")
    if want in offers:
        return want
    if offers:
        raise Unshardable(f"the model type '{kind}' offers no {want} parallelism in mlx-lm (it offers "
                          f"{' and '.join(offers)}): --sharding {want} cannot serve it")
    raise Unshardable(f"the model type '{kind}' offers neither tensor parallelism (shard) nor pipeline parallelism "
                      "in mlx-lm: it cannot be served across several processes")


def uneven_split(model, size: int) -> str | None:
    """What of a model's layers tensor parallelism cannot split evenly across ``size`` ranks (mlx-lm's ``shard``
    divides each layer's attention heads, KV heads and MLP width by the group's size), or None. The numbers are
    the model's settings, or its text model's (``text_config``) where it has one."""
    args = getattr(model, "args", None)
    text = getattr(args, "text_config", None)

    def setting(name: str):
        value = getattr(args, name, None)
        if value is None and text is not None:
            value = text.get(name) if isinstance(text, dict) else getattr(text, name, None)
        return value

    odd = [form.format(n) for form, n in (("{} attention heads", setting("num_attention_heads")),
                                          ("{} KV heads", setting("num_key_value_heads")),
                                          ("MLP width of {}", setting("intermediate_size")))
           if isinstance(n, int) and n % size]
    return ", ".join(odd) if odd else None


class Unshardable(ApiError):
    """A model this group cannot split across its ranks, refused naming its type: at startup the server stops
    with it; a catalog's model, at its load, is that request's 501, and the group serves the others."""

    def __init__(self, message: str):
        super().__init__("not_implemented", message, param="model", code="model_unshardable")


LOAD_FAILED = "\0failed: "  # what a rank that could not load its part tells the others (``Group.load``)


class GroupBroken(ApiError, RuntimeError):
    """A collective failed or timed out: a rank died or stopped answering (``why``). Every request the group
    cannot serve then, queued, in flight or new, is told so in its protocol's envelope: 503 ``group_broken``
    (a load balancer retries elsewhere), or that kind in-band once its stream is open."""

    def __init__(self, why: str):
        super().__init__("unavailable", f"The model cannot generate: the group of processes serving it is broken "
                                        f"({why}); restart the whole group", code="group_broken")
        self.why = why


class Group:
    def __init__(self, world, backend: str, want: str = "auto"):
        self.world = world
        self.want = want  # the sharding asked for: "auto", "tensor" or "pipeline" (--sharding)
        self.rank, self.size, self.backend = world.rank(), world.size(), backend
        self.hosts: list[str] = []
        self.holds: list[str] = []  # what each rank holds of the model
        self.sharding: str | None = None
        self.broken: str | None = None  # why the group no longer decodes (None while it is whole)
        self.broken_ranks: list[int] = []  # the ranks it lost (as far as this rank can tell)
        self._streams = threading.local()  # mlx streams belong to the thread that made them
        self.shares = 0  # broadcasts made, and the seconds they took (lockstep's share of a step)
        self.share_s = 0.0

    @classmethod
    def from_env(cls, want: str = "auto") -> "Group | None":
        if not launched():
            return None
        import mlx.core as mx

        backend = backend_name()
        world = mx.distributed.init(strict=True, backend="any" if backend == "mpi" else backend)
        if world.size() < 2:
            return None
        group = cls(world, backend, want)
        group.hosts = group.gather_text(socket.gethostname())
        log.info("rank %d of %d (%s backend) on %s", group.rank, group.size, backend, group.hosts[group.rank])
        return group

    @property
    def leader(self) -> bool:
        return self.rank == 0

    # -- collectives ------------------------------------------------------------------------------------------
    @property
    def stream(self):
        """The one stream this rank's model work and collectives run on (see the rules): one per thread (mlx's
        streams are the thread's), and only one thread decodes after loading (the model thread)."""
        import mlx.core as mx

        stream = getattr(self._streams, "stream", None)
        if stream is None:
            stream = self._streams.stream = mx.new_stream(mx.default_device())
        return stream

    def _sum(self, array):
        import mlx.core as mx

        if self.broken:
            raise GroupBroken(self.broken)
        try:
            out = mx.distributed.all_sum(array, group=self.world, stream=self.stream)
            mx.eval(out)
        except RuntimeError as exc:
            self.lost(exc, always=True)
            raise GroupBroken(self.broken) from exc
        return out

    def lost(self, exc: BaseException, always: bool = False) -> bool:
        """Whether ``exc`` (raised by a collective: the plan's, or one inside the model) means a rank is gone;
        if so (or ``always``), the group is broken, and says which rank."""
        others = [r for r in range(self.size) if r != self.rank]
        peers = ", ".join(map(str, others))
        if any(w in str(exc).lower() for w in ("[ring]", "peer", "connection", "[jaccl]", "[mpi]")):
            self.fail(f"rank {self.rank} lost rank {peers}: {exc}" if self.size == 2 else
                      f"rank {self.rank} lost a peer among ranks {peers}: {exc}", others)
            return True
        if always:
            self.fail(f"a collective failed on rank {self.rank}: {exc}", others)
        return always

    def share(self, obj: Any = None, counted: bool = True, report: bool = False) -> Any:
        """Rank 0's ``obj`` on every rank (a JSON value; the others pass nothing but ``report``: this follower
        diverged, which breaks the group on rank 0, naming it). The collectives queue behind
        the forward pass already queued on the same stream (a pipelined step): that is waited for first, so
        the time counted is the broadcast's own (not ``counted``: an idle heartbeat's, which is no step's)."""
        import mlx.core as mx
        import numpy as np

        mx.synchronize(self.stream)
        started = time.perf_counter()
        start = 4 + REPORT_BYTES
        room = SHARE_BYTES - start
        if self.leader:
            data = json.dumps(obj, separators=(",", ":")).encode()
            head = np.zeros(SHARE_BYTES, dtype=np.uint8)
            head[:4] = np.frombuffer(len(data).to_bytes(4, "little"), dtype=np.uint8)
            head[start:start + min(len(data), room)] = np.frombuffer(data[:room], dtype=np.uint8)
            reports = np.array(self._sum(mx.array(head)))[4:start]
            if len(data) > room:
                self._sum(mx.array(np.frombuffer(data[room:], dtype=np.uint8)))
            if reports.any():  # a follower diverged (see the rules)
                ranks = [i + 1 for i in range(REPORT_BYTES) if reports[i]]
                named = ", ".join(map(str, ranks)) + (" or above" if ranks[-1] == REPORT_BYTES else "")
                self.fail(f"rank {named} diverged from rank 0: it sampled another token than rank 0 accepted (is "
                          "the model at that path the same on every host?)", ranks)
                raise GroupBroken(self.broken)
        else:
            mine = np.zeros(SHARE_BYTES, dtype=np.uint8)
            if report:
                mine[4 + min(self.rank, REPORT_BYTES) - 1] = 1
            head = bytes(np.array(self._sum(mx.array(mine))))
            size = int.from_bytes(head[:4], "little")
            data = head[start:start + min(size, room)]
            if size > room:
                data += bytes(np.array(self._sum(mx.zeros(size - room, dtype=mx.uint8))))
            obj = json.loads(data)
        if counted:
            self.shares += 1
            self.share_s += time.perf_counter() - started
        return obj

    def gather_text(self, text: str) -> list[str]:
        """Each rank's ``text`` (up to HOST_BYTES bytes), on every rank."""
        import mlx.core as mx
        import numpy as np

        mine = np.zeros((self.size, HOST_BYTES), dtype=np.uint8)
        raw = text.encode()[:HOST_BYTES]
        mine[self.rank, :len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        every = np.array(self._sum(mx.array(mine)))
        return [bytes(r).rstrip(b"\0").decode(errors="replace") for r in every]

    # -- the model ---------------------------------------------------------------------------------------------
    def load(self, path):
        """This rank's part of the model at ``path`` (which must exist on every host), sharded by what the
        model offers; every rank learns what each holds. Every rank also learns whether each could load its
        part: where one could not (a model it cannot split, a damaged file), every rank raises (the failing one
        its own error, the others one naming it), none holds the model, and the group goes on whole, each rank
        as it was before the load, for the next request. A rank that failed before ``sharded_load`` returned
        first goes through the barrier it ends with, as the ranks that loaded did: the collectives pair up
        whichever ranks failed (one alone: its copy of the weights is damaged)."""
        import mlx.core as mx
        from mlx_lm.utils import load_model, sharded_load

        model, mine, loaded = None, "", False
        try:
            lazy, _ = load_model(path, lazy=True, strict=False)
            self.sharding = sharding(lazy, self.want, self.size)
            del lazy
            if self.sharding == "tensor":
                model, _ = sharded_load(str(path), tensor_group=self.world)
                loaded = True
                mine = f"1/{self.size} of every layer (tensor parallel)"
            else:
                model, _ = sharded_load(str(path), pipeline_group=self.world)
                loaded = True
                inner = model.model
                mine = f"layers {inner.start_idx}-{inner.end_idx - 1} (pipeline parallel)"
        except Exception as exc:  # the others are told, below, before any rank goes on
            error: Exception | None = exc
            mine = f"{LOAD_FAILED}{exc}"
            if not loaded:  # the barrier sharded_load ends with, which the ranks that loaded went through
                self._sum(mx.array(1.0))
        else:
            error = None
        told = self.gather_text(mine)
        failed = [r for r, text in enumerate(told) if text.startswith(LOAD_FAILED)]
        if error is not None:
            raise error
        if failed:
            del model
            raise RuntimeError(f"rank {failed[0]} could not load its part of the model: "
                               f"{told[failed[0]][len(LOAD_FAILED):]}")
        self.holds = told
        return model

    def fail(self, why: str, ranks: list[int] | None = None) -> None:
        """Break the group for good: ``why``, and the ``ranks`` it lost (all the others where unknown)."""
        if self.broken is None:
            self.broken = why
            self.broken_ranks = ranks if ranks is not None else [r for r in range(self.size) if r != self.rank]
            log.error("the group is broken: %s", why)

    def describe(self) -> dict:
        return {"size": self.size, "backend": self.backend, "sharding": self.sharding,
                "status": "broken" if self.broken else "ok", "error": self.broken,
                "broken_ranks": self.broken_ranks,
                "ranks": [{"rank": r, "host": self.hosts[r] if r < len(self.hosts) else None,
                           "holds": self.holds[r] if r < len(self.holds) else None} for r in range(self.size)],
                "plan_broadcasts": self.shares, "plan_broadcast_s": round(self.share_s, 6)}
