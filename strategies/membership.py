"""Keys and membership of a run: the key exchange, and its renewal before a round for the silos
that need it (new or replacement nodes, nodes the SuperLink reactivated since their key, silos
that refused with ``NEEDS_KEYS``). Keys are otherwise agreed once per run."""

from __future__ import annotations

import logging

from flwr.serverapp import Grid

from coded_fl.errors import ConfigurationError
from coded_fl.secagg.driver import KeyExchangeError, ProtocolDriver
from coded_fl.secagg.transport import Waits

from .run import RunState

__all__ = ["Membership"]

LOG = logging.getLogger("flwr")


def key_failure(
    keyless: list[int], errors: dict[int, str], node_of: dict[int, int], why: str
) -> str:
    """The message of a key exchange that left too few silos with keys: which silos hold no
    key first, then the most likely cause, then one line per silo (the last line of its
    error: a ClientApp's traceback goes to the debug log, not here).

    Parameters
    ----------
    keyless
        The silos asked that sent no key.
    errors
        Silo -> why its reply failed (silos missing here sent nothing in time).
    node_of
        Silo -> node id.
    why
        The server machine's reason (how many keys a round needs).

    Returns
    -------
    str
    """
    for silo, err in sorted(errors.items()):
        LOG.debug("[coded-fl] key exchange: silo %d failed: %s", silo, err)
    reasons = {s: _reason(errors[s]) if s in errors else "no reply in time" for s in keyless}
    texts = " ".join(errors.values())
    if not errors:
        cause = (
            "no reply in time: the nodes are not connected or not running the app (raise "
            "key_timeout if they start slowly)"
        )
    elif "coded_fl.errors" in texts or "codedfl." in texts:
        cause = "the silos' coded_secagg_mod refused the server's configuration (why, below)"
    elif any(m in texts for m in ("clipping_norm", "_mod")):  # another mod answered first
        cause = (
            "their ClientApp does not run coded_fl_flower.coded_secagg_mod first: "
            "ClientApp(mods=[coded_secagg_mod, ...]) (another mod before it, e.g. a DP "
            "clipping mod, fails on the key request; put such mods on @app.train(mods=[...]))"
        )
    else:
        cause = (
            "their ClientApp failed on the key request: most often it lacks "
            "coded_fl_flower.coded_secagg_mod (ClientApp(mods=[coded_secagg_mod]))"
        )
    by_reason: dict[str, list[int]] = {}
    for silo, why_not in reasons.items():
        by_reason.setdefault(why_not, []).append(silo)
    per_silo = "; ".join(
        f"silo(s) {silos} (node(s) {[node_of.get(s, '?') for s in silos]}): {why_not}"
        for why_not, silos in by_reason.items()
    )
    return (
        f"key exchange: silo(s) {keyless} sent no key ({why}). Most likely cause: {cause}. "
        f"Why: {per_silo}"
    )


def _reason(text: str) -> str:
    """One line of a failed reply's reason: a traceback's last line, and a ClientApp error as
    Flower wraps it (``<class '...Error'>:<'message'>``) reduced to the message."""
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    line = lines[-1] if lines else "failed"
    if line.startswith("<class '") and ">:<" in line:
        line = line.split(">:<", 1)[1].strip("<>'\"")
    return line[:600]


class Membership:
    """Which node is which silo, and which silos hold keys, for one run.

    Parameters
    ----------
    grid
        The Flower grid (nodes connected, their activation times).
    state
        The run (its node <-> silo maps, activation stamps and key exchanges are updated).
    protocol
        The run's protocol driver (the key exchange runs through it).
    key_timeout
        Deadline of a key exchange, in seconds.
    """

    def __init__(
        self, grid: Grid, state: RunState, protocol: ProtocolDriver, *, key_timeout: float
    ) -> None:
        self.grid = grid
        self.state = state
        self.protocol = protocol
        self.key_timeout = key_timeout

    def renew(self, before_round: int) -> tuple[bool, tuple[int, ...]]:
        """Before a round: give a silo whose node left to a newly connected node, and rerun the
        key exchange for the silos that need keys: new nodes, nodes the SuperLink reactivated
        since they sent their key (a restarted SuperNode loses ``context.state``), and silos
        that refused with ``NEEDS_KEYS``. Keys are otherwise agreed once per run.

        Parameters
        ----------
        before_round
            The round the renewal comes before.

        Returns
        -------
        tuple[bool, tuple[int, ...]]
            Whether a key exchange ran (a round trip), and the silos that got new keys.
        """
        st = self.state
        connected = set(self.grid.get_node_ids())
        spare = sorted(connected - set(st.node_of.values()))
        todo = set(st.needs_keys)
        now = self._activations()
        for silo, node in st.node_of.items():
            before, after = st.activated.get(node, ""), now.get(node, "")
            if before and after and after != before:
                todo.add(silo)
        for silo, node in sorted(st.node_of.items()):
            if node not in connected and spare:
                new = spare.pop(0)
                del st.silo_of[node]
                st.node_of[silo], st.silo_of[new] = new, silo
                todo.add(silo)
                LOG.info("[coded-fl] silo %d moved from node %d to new node %d", silo, node, new)
        if not todo:
            return False, ()
        try:
            keyed = self.key_exchange(before_round=before_round, silos=sorted(todo))
        except ConfigurationError as exc:  # the old keys stay; those silos remain stragglers
            LOG.warning("[coded-fl] rekeying %s failed: %s", sorted(todo), exc)
            return True, ()
        if keyed:
            LOG.info("[coded-fl] keys renewed for silo(s) %s", list(keyed))
        return True, keyed

    def _activations(self) -> dict[int, str]:
        """node -> when the SuperLink last (re)activated it ("" where it does not say)."""
        try:
            infos = list(self.grid.get_nodes())
        except Exception:  # a grid without get_nodes (older Flower, test doubles)
            return {}
        return {
            int(i.node_id): str(getattr(i, "last_activated_at", "") or "")
            for i in infos
            if hasattr(i, "node_id")
        }

    def key_exchange(self, *, before_round: int, silos: list[int] | None = None) -> tuple[int, ...]:
        """Ask ``silos`` (default all) for their public keys and fix the roster.

        Parameters
        ----------
        before_round
            The round the exchange comes before.
        silos
            The silos to ask (default: all).

        Returns
        -------
        tuple[int, ...]
            The silos that sent a key.

        Raises
        ------
        ConfigurationError
            If too few silos would have keys for a round; names the silos and their replies.
        """
        st = self.state
        stamps = self._activations()
        try:
            kx = self.protocol.key_exchange(
                silos, round_=before_round - 1, waits=Waits(keys=st.wait(self.key_timeout))
            )
        except KeyExchangeError as exc:
            st.key_exchanges.append((before_round, exc.asked))
            keyless = sorted(set(exc.asked) - set(exc.keyed))
            why = key_failure(keyless, exc.errors, st.node_of, str(exc))
            raise ConfigurationError(why) from None
        asked, missing, errors = kx.asked, kx.missing, kx.errors
        st.key_exchanges.append((before_round, asked))
        for silo in asked:
            if silo not in missing:  # keyed now: remember when its node was activated
                node = st.node_of[silo]
                if node in stamps:
                    st.activated[node] = stamps[node]
        if missing:
            LOG.warning(
                "[coded-fl] key exchange: no key from silo(s) %s: %s",
                list(missing),
                {s: errors.get(s, "no reply in time") for s in missing},
            )
        return tuple(s for s in asked if s not in missing)
