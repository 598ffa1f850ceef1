"""The shuffle's group key: agreed through the relay from the project's X25519 key agreement;
the relay cannot open it; bound to run, epoch and roster; an organisation key stops a relay that
substitutes public keys."""

from __future__ import annotations

import dataclasses

import pytest

from coded_fl.crypto import KeyPair, pairwise_key
from coded_fl.errors import InputError, LocalProtocolError, RemoteProtocolError
from coded_fl.shuffling.transport.groupkey import (
    Roster,
    RosterEntry,
    check_roster,
    derive_key,
    key_tag,
    make_group_key,
    open_group_key,
)

MEMBERS = (0, 1, 2, 3, 4)
ORG = bytes(range(100, 132))


def _setup(org_key=None, run="run-7", epoch=3):
    keys = {m: KeyPair.generate() for m in MEMBERS}
    tags = {}
    if org_key is not None:
        tags = {
            m: key_tag(org_key, run_id=run, epoch=epoch, member=m, public_key=k.public_bytes)
            for m, k in keys.items()
        }
    roster = Roster.of(run, epoch, {m: k.public_bytes for m, k in keys.items()}, tags)
    return keys, roster


def test_every_member_opens_the_same_group_key_and_subkeys_are_separated():
    keys, roster = _setup()
    for m in MEMBERS:
        check_roster(
            roster,
            run_id="run-7",
            epoch=3,
            me=m,
            my_public_key=keys[m].public_bytes,
            allowed=MEMBERS,
        )
    gk, boxes = make_group_key(keys[0], roster, me=0)
    assert sorted(boxes) == [1, 2, 3, 4] and len(gk) == 32
    for m in (1, 2, 3, 4):
        assert open_group_key(keys[m], roster, me=m, box=boxes[m]) == gk
    subkeys = {
        derive_key(gk, label, run_id=r, epoch=e)
        for label in ("messages", "manifest")
        for r in ("run-7", "run-8")
        for e in (3, 4)
    }
    assert len(subkeys) == 8 and gk not in subkeys


def test_the_relay_and_outsiders_cannot_open_a_box():
    keys, roster = _setup()
    _, boxes = make_group_key(keys[0], roster, me=0)
    relay = KeyPair.generate()  # the relay has every public key but no member's private key
    with pytest.raises(RemoteProtocolError, match="failed authentication"):
        open_group_key(relay, roster, me=1, box=boxes[1])
    with pytest.raises(RemoteProtocolError):  # another member's box
        open_group_key(keys[2], roster, me=2, box=boxes[1])
    with pytest.raises(LocalProtocolError):
        open_group_key(keys[0], roster, me=0, box=boxes[1])
    with pytest.raises(LocalProtocolError, match="not the leader"):
        make_group_key(keys[1], roster, me=1)


@pytest.mark.parametrize("change", ["epoch", "run", "roster", "flip"])
def test_a_box_opens_only_in_its_epoch_run_and_roster(change):
    keys, roster = _setup()
    _, boxes = make_group_key(keys[0], roster, me=0)
    box = boxes[2]
    other = roster
    if change == "epoch":
        other = dataclasses.replace(roster, epoch=4)
    elif change == "run":
        other = dataclasses.replace(roster, run_id="run-8")
    elif change == "roster":  # member 4 dropped from the roster member 2 sees
        other = Roster("run-7", 3, roster.entries[:-1])
    else:
        box = bytes([box[0] ^ 1]) + box[1:]
    with pytest.raises(RemoteProtocolError) as err:
        open_group_key(keys[2], other, me=2, box=box)
    assert err.value.sender == 0


def _check(roster, keys, me=0, org_key=None):
    check_roster(
        roster,
        run_id="run-7",
        epoch=3,
        me=me,
        my_public_key=keys[me].public_bytes,
        allowed=MEMBERS,
        org_key=org_key,
    )


def _forged(keys, mallory, tags=None):
    """The roster a substituting relay shows: member 1's key is its own."""
    return Roster.of(
        "run-7",
        3,
        {m: (mallory.public_bytes if m == 1 else k.public_bytes) for m, k in keys.items()},
        tags,
    )


def test_without_an_org_key_a_substituting_relay_learns_the_key_with_one_it_cannot():
    """The documented trust assumption, and what the organisation key buys."""
    keys, _ = _setup()
    mallory = KeyPair.generate()
    forged = _forged(keys, mallory)
    _check(forged, keys)  # nothing to tell them apart without an organisation key
    gk, boxes = make_group_key(keys[0], forged, me=0)
    assert open_group_key(mallory, forged, me=1, box=boxes[1]) == gk
    # with the organisation key every member refuses the forged roster, naming member 1
    keys, roster = _setup(ORG)
    forged = _forged(keys, mallory, {e.member: e.tag for e in roster.entries})
    for me in MEMBERS:
        if me != 1:
            with pytest.raises(RemoteProtocolError, match="not vouched for") as err:
                _check(forged, keys, me, ORG)
            assert err.value.sender == 1
    _check(roster, keys, 0, ORG)
    with pytest.raises(RemoteProtocolError, match="not vouched for"):  # another org's key
        _check(roster, keys, 0, bytes(32))


def test_roster_checks_name_the_problem():
    keys, roster = _setup()
    me = keys[0].public_bytes
    kw = dict(run_id="run-7", epoch=3, me=0, my_public_key=me)
    with pytest.raises(RemoteProtocolError, match="not in this epoch"):
        check_roster(roster, allowed=(0, 1, 2, 3), **kw)
    with pytest.raises(RemoteProtocolError, match="epoch 3, expected"):
        check_roster(roster, allowed=MEMBERS, **{**kw, "epoch": 4})
    with pytest.raises(RemoteProtocolError, match="own public key"):
        check_roster(roster, allowed=MEMBERS, **{**kw, "my_public_key": keys[1].public_bytes})
    small_order = bytes(32)  # the all-zero point: every shared secret would be zero
    bad = Roster("run-7", 3, (*roster.entries[:4], RosterEntry(4, small_order)))
    with pytest.raises(RemoteProtocolError, match="small-order") as err:
        check_roster(bad, allowed=MEMBERS, **kw)
    assert err.value.sender == 4
    with pytest.raises(InputError, match="distinct and sorted"):
        Roster("run-7", 3, (roster.entries[1], roster.entries[0]))
    with pytest.raises(InputError):
        Roster("run-7", 3, ())


def test_no_key_material_in_reprs_or_errors():
    keys, roster = _setup()
    gk, boxes = make_group_key(keys[0], roster, me=0)
    pair = pairwise_key(keys[0], keys[1].public_bytes, run_id=b"run-7", me=0, peer=1)
    texts = [repr(roster), repr(roster.entries[0]), repr(keys[0])]
    try:
        open_group_key(keys[2], roster, me=2, box=boxes[1])
    except RemoteProtocolError as exc:
        texts.append(str(exc))
    blob = " ".join(texts)
    for secret in (gk, pair, keys[0].private_bytes):
        assert secret.hex() not in blob and secret.hex()[:16] not in blob
