"""The shuffle through an untrusted relay: keys, wire format, the members' and relay's machines.

- :mod:`~coded_fl.shuffling.transport.groupkey`, :mod:`~coded_fl.shuffling.transport.roster`:
  the epoch's group key from the project's key agreement, and the roster it is agreed over;
- :mod:`~coded_fl.shuffling.transport.wire`: the framing of the public job
  (:mod:`~coded_fl.shuffling.transport.job`) and the packets
  (:mod:`~coded_fl.shuffling.transport.packets`, with their JSON bodies in
  :mod:`~coded_fl.shuffling.transport.payloads` and :mod:`~coded_fl.shuffling.transport.fields`);
- :mod:`~coded_fl.shuffling.transport.shares`: sealed manifest shares;
- :mod:`~coded_fl.shuffling.transport.member`: a silo's or the sender's machine (its phases in
  ``member_state``, ``member_keys``, ``member_delivery``);
- :mod:`~coded_fl.shuffling.transport.coordinator`, :mod:`~coded_fl.shuffling.transport.routing`:
  the relay's machine (its phases in ``relay_core``, ``relay_hello``, ``relay_keys``,
  ``relay_delivery``, ``relay_result``), its plan and forwarding;
- :mod:`~coded_fl.shuffling.transport.results`: what an epoch did;
- :mod:`~coded_fl.shuffling.transport.loopback`: relay and members in one process.

The top layer of the shuffle: builds on :mod:`~coded_fl.shuffling.plan`,
:mod:`~coded_fl.shuffling.codec` and :mod:`~coded_fl.shuffling.storage`. The Flower adapters
(:mod:`strategies.shuffle`, :mod:`clients.shuffle`) carry its packets.
"""
