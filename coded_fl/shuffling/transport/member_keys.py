"""The member's key agreement: its key pair per epoch, the group key sealed, opened or continued
from the previous epoch (:mod:`~coded_fl.shuffling.transport.keyreuse`), its share."""

from __future__ import annotations

from coded_fl.errors import RemoteProtocolError
from coded_fl.prg import fresh_seed
from coded_fl.shuffling.storage.store import UnitStore
from coded_fl.shuffling.transport.groupkey import (
    Roster,
    check_roster,
    derive_key,
    key_tag,
    make_group_key,
    open_group_key,
)
from coded_fl.shuffling.transport.keyreuse import KeyCarry, ratchet, resume_id
from coded_fl.shuffling.transport.member_state import MemberCore, MemberStage
from coded_fl.shuffling.transport.shares import seal_share, vouched_units
from coded_fl.shuffling.transport.wire import (
    GroupKeyReply,
    GroupKeyRequest,
    Hello,
    HelloReply,
    JoinReply,
    JoinRequest,
    PlanRequest,
    ShuffleJob,
)

__all__ = ["MemberKeysPhase"]


class MemberKeysPhase(MemberCore):
    """The Hello, GroupKeyRequest and JoinRequest handlers of
    :class:`~coded_fl.shuffling.transport.member.ShuffleMember`, on the state
    :class:`~coded_fl.shuffling.transport.member_state.MemberCore` declares.

    Attributes
    ----------
    roster : Roster or None
        The epoch's roster, once the group key is known.
    """

    def _check_roster(self, job: ShuffleJob, roster: Roster | None) -> Roster:
        if roster is None:
            raise RemoteProtocolError("request carries no roster")
        check_roster(
            roster,
            run_id=job.run_id,
            epoch=job.epoch,
            me=self.member,
            my_public_key=self._keys().public_bytes,
            allowed=job.members,
            org_key=self._org_key,
        )
        if self.roster is not None and self.roster != roster:
            raise RemoteProtocolError(
                "a second, different roster for the same epoch (the relay equivocates)"
            )
        return roster

    def _make_share(self, job: ShuffleJob, store: UnitStore, key: bytes | None = None) -> bytes:
        """This member's sealed manifest share (made once per epoch), under the epoch's
        manifest key (``key``: that of a continued group key, before it is the epoch's)."""
        if self._share is not None:
            return self._share
        return seal_share(
            vouched_units(job, self.member, store),
            job=job,
            member=self.member,
            key=self._key(job, "manifest")
            if key is None
            else derive_key(key, "manifest", run_id=job.run_id, epoch=job.epoch),
            entropy=self._entropy,
        )

    def _keyed(self, job: ShuffleJob, roster: Roster, key: bytes, uses: int) -> None:
        """The group key is known: keep it for the epoch, and as the key to continue from."""
        self._group_key, self.roster = key, roster
        self._carry = KeyCarry(
            key=key,
            run_id=job.run_id,
            epoch=job.epoch,
            members=roster.members,
            uses=uses,
            org=self._org_key is not None,
        )

    def _offer(self, job: ShuffleJob, store: UnitStore) -> tuple[bytes, tuple[int, ...], bytes]:
        """The continuation this member offers at the hello (empty if it has none to offer);
        the same offer for the same hello, in every stage of the epoch."""
        if self._resume_key is None:
            carry = self._carry
            if carry is None or not carry.offers(
                run_id=job.run_id, epoch=job.epoch, org=self._org_key is not None
            ):
                return b"", (), b""
            key = ratchet(carry, epoch=job.epoch)
            self._resume_share = self._make_share(job, store, key)
            self._resume_members, self._resume_key = carry.members, key
        return resume_id(self._resume_key), self._resume_members or (), self._resume_share or b""

    # ------------------------------------------------------------------ handlers (the table)
    def _on_hello(self, p: Hello, store: UnitStore) -> HelloReply:
        """A new job: a fresh key pair for its epoch (the same one if asked again)."""
        job = p.job
        if job is None:  # pragma: no cover - the envelope check refuses it
            raise RemoteProtocolError("Hello's digest does not match its job")
        if self.member not in job.members:
            return HelloReply(p.digest, self.member, b"", b"", store.epoch)
        if self._is_silo(job) and store.epoch is not None and job.epoch <= store.epoch:
            raise RemoteProtocolError(
                f"job epoch {job.epoch} is not after this silo's store epoch {store.epoch} "
                "(stale or replayed job)"
            )
        if self.job is None or self.job.digest() != p.digest or self.stage == MemberStage.IDLE:
            self._reset(job)
            self._private = fresh_seed(self._entropy)
            self.stage = MemberStage.HELLO
        pub = self._keys().public_bytes
        tag = b""
        if self._org_key is not None:
            tag = key_tag(
                self._org_key,
                run_id=job.run_id,
                epoch=job.epoch,
                member=self.member,
                public_key=pub,
            )
        held = None
        if self._is_silo(job):
            have = set(store.units())
            held = tuple(u for u in job.units if u in have)
        resume, members, share = self._offer(job, store)
        return HelloReply(
            p.digest, self.member, pub, tag, store.epoch, held, resume, members, share
        )

    def _on_group_key(self, p: GroupKeyRequest, store: UnitStore) -> GroupKeyReply:
        """The leader draws the group key and seals it for every other member (once)."""
        job = self._current_job()
        roster = self._check_roster(job, p.roster)
        if roster.leader != self.member:
            raise RemoteProtocolError(
                f"member {self.member} is not the leader of this roster ({roster.leader} is)"
            )
        if self._boxes is None:
            key, self._boxes = make_group_key(
                self._keys(), roster, me=self.member, entropy=self._entropy
            )
            self._keyed(job, roster, key, uses=0)
        share = self._make_share(job, store)
        self._share, self.stage = share, MemberStage.KEYED
        return GroupKeyReply(p.digest, self.member, tuple(sorted(self._boxes.items())), share)

    def _on_join(self, p: JoinRequest, store: UnitStore) -> JoinReply:
        """Open the group key the leader sealed for this member; answer with the share."""
        job = self._current_job()
        roster = self._check_roster(job, p.roster)
        if roster.leader == self.member:
            raise RemoteProtocolError("the leader is not sent a group key box")
        key = open_group_key(self._keys(), roster, me=self.member, box=p.box)
        if self._group_key is not None and key != self._group_key:
            raise RemoteProtocolError("a second, different group key for the same epoch")
        self._keyed(job, roster, key, uses=0)
        share = self._make_share(job, store)
        self._share, self.stage = share, MemberStage.KEYED
        return JoinReply(p.digest, self.member, share)

    def _continue_key(self, p: PlanRequest) -> None:
        """A PlanRequest straight after the hello: the relay skipped the key stages, so this
        member continues the previous epoch's group key, if the roster allows it (else refused,
        nothing changes)."""
        job = self._current_job()
        carry, key = self._carry, self._resume_key
        if carry is None or key is None:
            raise RemoteProtocolError(
                "PlanRequest before any group key: this member offered no key to continue "
                "(the relay skipped the key stages)"
            )
        roster = self._check_roster(job, p.roster)
        if roster.members != carry.members:
            raise RemoteProtocolError(
                f"the relay continues the group key of members {list(carry.members)} for a "
                f"roster of members {list(roster.members)}: a key is only continued for the "
                "same members"
            )
        self._keyed(job, roster, key, uses=carry.uses + 1)
        self._share, self.stage = self._resume_share, MemberStage.KEYED
