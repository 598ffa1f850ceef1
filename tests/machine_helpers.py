"""Helpers for tests that drive the protocol machines by hand, step by step (the product and
the simulations only drive the server machine through its flow, ``next_action``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coded_fl.secagg.client import ClientMachine
from coded_fl.secagg.messages import ViewRequest, decode, encode
from coded_fl.secagg.server import ServerMachine


def sign_views(server: ServerMachine, clients: Mapping[int, ClientMachine], requests: Any) -> Any:
    """For tests that drive the machines by hand: where the silos sign their keys, what
    ``close_collection`` (or ``retry_recovery``) returned are view requests; deliver them
    through the codec and return :meth:`~coded_fl.secagg.server.ServerMachine.close_views`
    (again while it asks for a smaller set). Anything else is returned as it is.

    Parameters
    ----------
    server
        The server machine.
    clients
        Silo -> its machine (a silo missing here signs nothing).
    requests
        What the server machine returned.

    Returns
    -------
    list[RecoveryRequest] | RoundAborted | Any
        The recovery requests (or the abort), or ``requests`` unchanged.
    """
    while isinstance(requests, list) and requests and isinstance(requests[0], ViewRequest):
        for req in requests:
            if req.recipient in clients:
                reply = clients[req.recipient].receive(decode(encode(req)))
                server.receive(decode(encode(reply)))
        requests = server.close_views()
    return requests
