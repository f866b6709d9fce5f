"""Which controller address a broker's next heartbeat goes to: finding the acting controller.

The operator runs several replicas; one acts, the others stand by and answer a
heartbeat with NOT_CONTROLLER. A broker is told where they are by one or more
base URLs (`--controller`, repeated or comma separated), each of whose host
names may resolve to several addresses (a headless Service names every Ready
replica), much as a Kafka broker is given the controller quorum and finds the
active controller itself.

`ControllerTargets` owns that search, without I/O and without a clock of its
own. It is told:
- the configured URLs (at construction);
- what each host name resolved to (`resolved`), when it asked for it
  (`hosts_to_resolve`);
- the outcome of each heartbeat: answered (`answered`), or failed and how
  (`failed`: unreachable, timed out, NOT_CONTROLLER, any other bad answer).

It answers which endpoint to send to (`current`) and, after a failure,
whether to try the next one at once (`failed` returns True until every
endpoint failed once in this round). So a broker:
- sticks to the endpoint that answered last, for as long as it answers;
- moves on at the first failure, and tries the whole list within one
  heartbeat round instead of one address per heartbeat interval (a wrong
  address costs a refused connection or a NOT_CONTROLLER answer, not a
  session timeout);
- resolves host names again when it starts, after the current endpoint fails
  (at most every `retry_resolve_ms`, so a round over dead addresses finds the
  replicas that replaced them), and every `resolve_interval_ms` anyway;
- keeps the addresses it had when a lookup fails or finds nothing.

The I/O shell (`controller_client`) connects to an endpoint's resolved
address and verifies TLS against the host name of its URL
(`ControllerEndpoint.server_hostname`).
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

DEFAULT_RESOLVE_INTERVAL_MS: Final = 30_000
"""Host names are looked up again this often even while the current endpoint answers."""
DEFAULT_RETRY_RESOLVE_MS: Final = 1_000
"""After a failure, a lookup at most this often (a whole round can fail in a few ms)."""


class ControllerUrlError(ValueError):
    """A controller URL that is not scheme://host[:port]."""


class Failure(enum.StrEnum):
    """Why a heartbeat to an endpoint went unanswered."""

    UNREACHABLE = "unreachable"
    """No connection (refused, reset, no route, no such host)."""
    TIMED_OUT = "timed out"
    NOT_CONTROLLER = "not controller"
    """A replica standing by: it took nothing from the heartbeat."""
    BAD_ANSWER = "bad answer"
    """Any other error status, or a body that is not a heartbeat answer."""


def split_controller_urls(values: Iterable[str]) -> tuple[str, ...]:
    """Base URLs from repeated and comma-separated values, in order, without duplicates
    or trailing slashes; ControllerUrlError for one that is not scheme://host[:port]."""
    urls: list[str] = []
    for value in values:
        for item in value.split(","):
            url = item.strip().rstrip("/")
            if not url:
                continue
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ControllerUrlError(f"controller URL {item.strip()!r} is not http(s)://HOST")
            if url not in urls:
                urls.append(url)
    if not urls:
        raise ControllerUrlError("no controller URL given")
    return tuple(urls)


def is_address(host: str) -> bool:
    """Whether `host` is an IP address literal (nothing to resolve)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class ControllerEndpoint:
    """One place a heartbeat can go: a configured URL, and the address its host name
    resolved to (None: connect by the URL's host, an address literal or not yet resolved)."""

    url: str
    address: str | None = None

    @property
    def host(self) -> str:
        host = urlsplit(self.url).hostname
        assert host is not None  # split_controller_urls checked it
        return host

    def request_url(self, path: str) -> str:
        """Where to send `path`: the URL with its host replaced by the resolved address."""
        if self.address is None:
            return self.url + path
        parts = urlsplit(self.url)
        address = f"[{self.address}]" if ":" in self.address else self.address
        port = f":{parts.port}" if parts.port is not None else ""
        return f"{parts.scheme}://{address}{port}{parts.path}{path}"

    @property
    def host_header(self) -> str | None:
        """The Host header the URL names, when connecting to a resolved address."""
        return urlsplit(self.url).netloc if self.address is not None else None

    @property
    def server_hostname(self) -> str | None:
        """The name TLS verifies (and sends as SNI) when connecting to a resolved
        address: the host name of the URL, never the address."""
        if self.address is None or urlsplit(self.url).scheme != "https":
            return None
        return self.host

    def __str__(self) -> str:
        return self.url if self.address is None else f"{self.url} ({self.address})"


@dataclass
class ControllerTargets:
    urls: tuple[str, ...]
    resolve_interval_ms: int = DEFAULT_RESOLVE_INTERVAL_MS
    retry_resolve_ms: int = DEFAULT_RETRY_RESOLVE_MS
    endpoints: tuple[ControllerEndpoint, ...] = ()
    """Every endpoint in order: per URL, one per address its host resolved to."""
    misses: int = 0
    """Failures since the last answer."""
    _addresses: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _resolved_ms: int | None = None
    _current: int = 0

    def __post_init__(self) -> None:
        if not self.urls:
            raise ControllerUrlError("no controller URL given")
        self.endpoints = self._expand()

    @property
    def current(self) -> ControllerEndpoint:
        """Where the next heartbeat goes (also read by the keepalive thread: the modulo
        keeps a read between two assignments of `resolved` in range)."""
        return self.endpoints[self._current % len(self.endpoints)]

    def names(self) -> tuple[str, ...]:
        """The host names of the URLs that are not address literals."""
        hosts = (ControllerEndpoint(url).host for url in self.urls)
        return tuple(dict.fromkeys(h for h in hosts if not is_address(h)))

    def hosts_to_resolve(self, now_ms: int) -> tuple[str, ...]:
        """The host names to look up before the next heartbeat (none: not due)."""
        names = self.names()
        if not names:
            return ()
        if self._resolved_ms is None:
            return names
        age = now_ms - self._resolved_ms
        if age >= self.resolve_interval_ms or (self.misses > 0 and age >= self.retry_resolve_ms):
            return names
        return ()

    def resolved(self, addresses: Mapping[str, Sequence[str]], now_ms: int) -> None:
        """What the host names resolved to; a name that resolved to nothing (a failed
        lookup) keeps its previous addresses. The current endpoint stays current when it
        is still among the endpoints."""
        self._resolved_ms = now_ms
        for host, found in addresses.items():
            unique = tuple(dict.fromkeys(found))
            if unique:
                self._addresses[host] = unique
        current = self.current
        self.endpoints = self._expand()
        self._current = self.endpoints.index(current) if current in self.endpoints else 0

    def answered(self, endpoint: ControllerEndpoint) -> None:
        """`endpoint` answered a heartbeat: heartbeats keep going there."""
        if endpoint in self.endpoints:
            self._current = self.endpoints.index(endpoint)
        self.misses = 0

    def failed(self, endpoint: ControllerEndpoint, failure: Failure) -> bool:
        """A heartbeat to `endpoint` went unanswered (`failure`): the next one goes to the
        next endpoint. True while the endpoints have not all failed in this round (send
        again at once); False when a round is over (wait a heartbeat interval, then start
        the next round where this one ended)."""
        del failure  # every failure moves on; the kind is for the shell's log and metrics
        if endpoint == self.current:
            self._current = (self._current + 1) % len(self.endpoints)
        self.misses += 1
        return self.misses % len(self.endpoints) != 0

    def _expand(self) -> tuple[ControllerEndpoint, ...]:
        out: list[ControllerEndpoint] = []
        for url in self.urls:
            host = ControllerEndpoint(url).host
            found = self._addresses.get(host, ())
            if found and not is_address(host):
                out.extend(ControllerEndpoint(url, a) for a in found)
            else:
                out.append(ControllerEndpoint(url))
        return tuple(dict.fromkeys(out))
