"""The relay's hello stage: who is in (the members' public keys, their stores), the roster."""

from __future__ import annotations

from coded_fl.errors import RemoteProtocolError
from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.transport.groupkey import Roster
from coded_fl.shuffling.transport.relay_core import RelayCore, RelayStage
from coded_fl.shuffling.transport.wire import Hello, HelloReply

__all__ = ["RelayHelloPhase"]


class RelayHelloPhase(RelayCore):
    """The hello stage of :class:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator`: its
    methods, on the state :class:`~coded_fl.shuffling.transport.relay_core.RelayCore` declares.

    Attributes
    ----------
    roster : Roster or None
        Fixed by :meth:`close_hello`.
    """

    # ------------------------------------------------------------------ 1. hello
    def hello(self) -> Hello:
        """The request for every node (members answer with their public key).

        Returns
        -------
        Hello
            Carries the public job.

        Raises
        ------
        LocalProtocolError
            Not in the hello stage.
        """
        self._expect(RelayStage.HELLO)
        return Hello(self.job.digest(), -1, self.job)

    def _on_hello(self, node: int, p: HelloReply) -> None:
        if p.digest != self.job.digest():
            raise RemoteProtocolError(f"node {node} answered the hello with {type(p).__name__}")
        if not p.public_key:
            return  # not a member of this job
        m = p.member
        if m not in self.job.members:
            raise RemoteProtocolError(f"node {node} claims member {m}, not in this job")
        if m in self._node and self._node[m] != node:
            raise RemoteProtocolError(
                f"nodes {self._node[m]} and {node} both claim member {m}: give each node its "
                "own codedfl.silo in its node config"
            )
        self._node[m] = node
        self._keys[m] = (p.public_key, p.tag)
        self._store_epoch[m] = p.store_epoch
        self._holdings[m] = p.holdings
        if p.resume:
            self._offers[m] = (p.resume, p.resume_members, p.resume_share)
        else:
            self._offers.pop(m, None)

    def stale_silos(self) -> dict[int, tuple[UnitId, ...]]:
        """Silos whose hello reported a store that lacks units the job's current assignment
        gives them (the server's view fell behind, e.g. a delivery reply lost after the
        commit): silo -> those units. The job cannot be delivered as planned.

        Returns
        -------
        dict of int to tuple of UnitId
            Empty when every answering silo holds what the job says it holds (or did not
            report its holdings).
        """
        current, _ = self.job.assignments()
        out: dict[int, tuple[UnitId, ...]] = {}
        for k, held in sorted(self._holdings.items()):
            if held is None or k >= self.job.K:
                continue
            have = set(held)
            lacking = tuple(u for u in self.job.units if k in current.get(u, ()) and u not in have)
            if lacking:
                out[k] = lacking
        return out

    def hello_complete(self) -> bool:
        """True once every member of the job answered the hello (a driver may stop waiting)."""
        return len(self._keys) == len(self.job.members)

    def close_hello(self) -> bool:
        """Fix the roster.

        Returns
        -------
        bool
            False (aborted) without a central sender or any silo.

        Raises
        ------
        LocalProtocolError
            Not in the hello stage.
        """
        self._expect(RelayStage.HELLO)
        for m in self.job.members:
            if m not in self._keys:
                self.fail(m, "did not answer the hello")
        sender = self.job.sender
        if sender is not None and sender not in self._keys:
            return self._abort(f"the central sender (member {sender}) did not answer the hello")
        if not any(m < self.job.K for m in self._keys):
            return self._abort("no silo answered the hello")
        # a stale silo that must send cannot: stop before any key is made (the others would
        # wait on it); one that only receives drops at the plan stage, naming what it lacks
        stale = {k: u for k, u in self.stale_silos().items() if self.routing.messages_from(k).size}
        if stale:
            named = "; ".join(
                f"silo {k} lacks {len(u)} unit(s) it is listed as holding, e.g. {list(u[:3])}"
                for k, u in sorted(stale.items())
            )
            return self._abort(
                f"stale view of the stores: {named}: plan again from the holdings the silos "
                "reported (ShuffleResult.silos[k].holdings)"
            )
        self.roster = Roster.of(
            self.job.run_id,
            self.job.epoch,
            {m: k for m, (k, _) in self._keys.items()},
            {m: t for m, (_, t) in self._keys.items()},
        )
        if self._continues():
            # every member holds the same key, for exactly these members: skip the key stages
            self._shares = {m: share for m, (_, _, share) in self._offers.items()}
            self.keys_reused, self.stage = True, RelayStage.PLAN
        else:
            self.stage = RelayStage.KEY
        return True

    def _continues(self) -> bool:
        """Whether every member of the roster offered the same key continuation, for exactly
        the roster's members (:mod:`~coded_fl.shuffling.transport.keyreuse`)."""
        members = self.members
        if not self.reuse_keys or set(self._offers) != set(members):
            return False
        ids = {resume for resume, _, _ in self._offers.values()}
        sets = {tuple(held) for _, held, _ in self._offers.values()}
        return len(ids) == 1 and sets == {members}
