"""One shuffle at a silo: the sans-IO machines and the on-disk unit store they update.

- :mod:`~coded_fl.shuffling.storage.session`: the sender, silo and relay state machines of one
  shuffle (AES-GCM), over a plan and the codec (the sealing in
  :mod:`~coded_fl.shuffling.storage.sealing`, the silo's side in
  :mod:`~coded_fl.shuffling.storage.delivery`);
- :mod:`~coded_fl.shuffling.storage.store`: a silo's atomic on-disk unit store;
- :mod:`~coded_fl.shuffling.storage.silo`: a store meets a plan (placement, side information,
  committing a delivery).

Builds on :mod:`~coded_fl.shuffling.plan` and :mod:`~coded_fl.shuffling.codec`; knows nothing
of the relay or the wire.
"""
