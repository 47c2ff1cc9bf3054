"""Data governance: restricted data (e.g. the SQPsych clinical questionnaires) never leaves the cluster.

The check fails closed: anything but an explicit `public` sensitivity is treated as restricted,
and anything but an explicit `local` locality is treated as external.

"Inside" is either a model we host (`provider: serve`, `locality: local`) or an on-prem
OpenAI-compatible server (vLLM, TGI, llama.cpp in the same network, as the SQPsych authors ran
theirs): `provider: openai`, `locality: local`, and a `base_url` whose host is checked before any
request. Declaring `locality: local` is not enough. The host must be

- an IP literal that is loopback, RFC 1918 private (10/8, 172.16/12, 192.168/16) or IPv6
  unique-local (fc00::/7); or
- `localhost`, or a name under a cluster-internal suffix (`.svc`, `.svc.cluster.local`, or one
  the cluster config lists in `internal_suffixes`), that resolves, every address it resolves to
  being one of the above (a DNS entry pointing outside is refused).

A public address, a name outside those suffixes, or a name that does not resolve is refused with
a message naming the model and the host. The client does not follow redirects for such models,
so a server that redirects elsewhere gets no request body (the call fails as a row).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from typing import Callable, Iterable, Literal
from urllib.parse import urlsplit

from jobs.core.modelconfig import ModelConfig

Sensitivity = Literal["public", "restricted"]
Resolver = Callable[[str], list[str]]
CLUSTER_SUFFIXES = (".svc", ".svc.cluster.local")


class DataGovernanceError(RuntimeError):
    """Restricted data would be sent to a model outside the cluster."""


def system_resolver(host: str) -> list[str]:
    """Every address `host` resolves to (IPv4 and IPv6); [] when it does not resolve."""
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, None)})
    except (socket.gaierror, UnicodeError, OSError):
        return []


@dataclass
class NetworkPolicy:
    """What counts as inside: the cluster config's extra suffixes and how names are resolved."""

    internal_suffixes: tuple[str, ...] = ()
    resolve: Resolver = system_resolver
    _cache: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def suffixes(self) -> tuple[str, ...]:
        extra = tuple("." + s.lstrip(".") for s in self.internal_suffixes)
        return CLUSTER_SUFFIXES + extra

    def addresses(self, host: str) -> list[str]:
        if host not in self._cache:
            self._cache[host] = self.resolve(host)
        return self._cache[host]


_POLICY = NetworkPolicy()


def configure(internal_suffixes: Iterable[str] = ()) -> None:
    """Set the process's policy from the cluster config (the job entry calls it once)."""
    global _POLICY
    _POLICY = NetworkPolicy(internal_suffixes=tuple(internal_suffixes))


def inside_address(address: str) -> bool:
    """Loopback, RFC 1918 private, or IPv6 unique-local (not link-local, not public)."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    if getattr(ip, "ipv4_mapped", None):
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return True
    if ip.version == 4:
        return any(ip in ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
    return ip in ipaddress.ip_network("fc00::/7")


def host_problem(base_url: str | None, policy: NetworkPolicy | None = None) -> tuple[str | None, str | None]:
    """(host, why it is not inside) for a base URL; why is None when the host is inside."""
    policy = policy or _POLICY
    host = (urlsplit(base_url or "").hostname or "").lower().rstrip(".")
    if not host:
        return None, "no base_url host to check"
    try:
        ipaddress.ip_address(host.split("%")[0])
        return host, None if inside_address(host) else "a public address"
    except ValueError:
        pass
    if host != "localhost" and not host.endswith(policy.suffixes()):
        return host, (f"a name outside the cluster's internal suffixes {list(policy.suffixes())} "
                      "(add the site's suffix to the cluster config's internal_suffixes)")
    addresses = policy.addresses(host)
    if not addresses:
        return host, "a name that does not resolve"
    outside = [a for a in addresses if not inside_address(a)]
    if outside:
        return host, f"a name that resolves to public address(es) {outside}"
    return host, None


def check_governance(model: ModelConfig, sensitivity: str, dataset: str | None = None,
                     policy: NetworkPolicy | None = None) -> None:
    """Raise `DataGovernanceError` unless `model` may see data of this `sensitivity`."""
    if sensitivity == "public":
        return
    if model.locality == "local" and model.provider == "serve":
        return
    where = f"dataset {dataset!r}" if dataset else "this data"
    if model.locality == "local" and model.provider == "openai":
        host, why = host_problem(model.base_url, policy)
        if why is None:
            return
        raise DataGovernanceError(
            f"refused: {where} is {sensitivity!r} and model {model.name!r} (provider 'openai', locality "
            f"'local') has base_url host {host!r}: {why}. Restricted data only goes to servers inside the "
            "network: loopback, RFC 1918 / unique-local addresses, or cluster-internal names that resolve to them."
        )
    raise DataGovernanceError(
        f"refused: {where} is {sensitivity!r} and model {model.name!r} is "
        f"{model.locality!r} (provider {model.provider!r}); restricted data is only sent to "
        "models hosted inside the cluster (provider: serve, or an on-prem provider: openai server with "
        "locality: local on a private host). Remove the model from this job or use a locally hosted one."
    )


def check_all(models: Iterable[ModelConfig], sensitivity: str, dataset: str | None = None) -> None:
    """Check every model before a job sends anything; the first violation stops the job."""
    for model in models:
        check_governance(model, sensitivity, dataset)


def follows_redirects(model: ModelConfig) -> bool:
    """Whether the client may follow an HTTP redirect for this model: never for an on-prem
    server that may see restricted data (a redirect could carry the body out of the network)."""
    return not (model.provider == "openai" and model.locality == "local")
