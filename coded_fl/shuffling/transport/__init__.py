"""The shuffle through an untrusted relay: keys, wire format, the members' and relay's machines.

- :mod:`~coded_fl.shuffling.transport.groupkey`: the epoch's group key from the project's key
  agreement;
- :mod:`~coded_fl.shuffling.transport.wire`: the public job and the packets;
- :mod:`~coded_fl.shuffling.transport.shares`: sealed manifest shares;
- :mod:`~coded_fl.shuffling.transport.member`: a silo's or the sender's machine;
- :mod:`~coded_fl.shuffling.transport.coordinator`, :mod:`~coded_fl.shuffling.transport.routing`:
  the relay's machine, its plan and forwarding;
- :mod:`~coded_fl.shuffling.transport.results`: what an epoch did;
- :mod:`~coded_fl.shuffling.transport.loopback`: relay and members in one process.

The top layer of the shuffle: builds on :mod:`~coded_fl.shuffling.plan`,
:mod:`~coded_fl.shuffling.codec` and :mod:`~coded_fl.shuffling.storage`. The Flower adapters
(:mod:`strategies.shuffle`, :mod:`clients.shuffle`) carry its packets.
"""
