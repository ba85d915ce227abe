"""INFO: what a node reports about itself, with the facts of the process that only
the shell can read (``HostFacts``), handed in when a client asks (the ``Info`` shell
request, ``Node.info``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from .. import __version__
from ..codec import resp

if TYPE_CHECKING:
    from .node import Node


def _human(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What INFO reports that only the shell can read: the shell reads them when a
    client asks (the ``Info`` request) and hands them in (``Node.info``)."""

    pid: int = 0
    rss: int = 0  # resident memory, bytes
    cpu_user: float = 0.0  # seconds
    cpu_sys: float = 0.0
    os: str = ""
    arch_bits: int = 64
    multiplexing_api: str = ""
    executable: str = ""
    config_file: str = ""
    aof: tuple[tuple[str, object], ...] | None = None  # the AOF file's persistence fields


# INFO: section name -> (field, value) pairs, each value printed as str() does
InfoSections = dict[str, list[tuple[str, object]]]


def info_sections(node: Node, host: HostFacts, now: int) -> InfoSections:
    """Every INFO section as an ordered list of (field, value) pairs; ``host``: the
    facts only the shell can read."""
    st = node.stats
    cfg = node.config
    uptime = (now - node.start_time) // 1000
    blocked = sum(1 for c in node.clients.values() if c.blocked is not None)
    qbuf = max((c.qbuf for c in node.clients.values()), default=0)
    rss = host.rss
    peak = max(node.mem.peak, node.mem.used)
    node.mem.peak = peak
    kbps_in, kbps_out = node.net_kbps()
    return {
        "server": [
            ("disque_version", __version__),
            ("disque_git_sha1", "00000000"),
            ("disque_git_dirty", 0),
            ("disque_build_id", "disquepy"),
            ("os", host.os),
            ("arch_bits", host.arch_bits),
            ("multiplexing_api", host.multiplexing_api),
            ("gcc_version", "0.0.0"),
            ("process_id", host.pid),
            ("run_id", node.run_id),
            ("tcp_port", node.port),
            ("uptime_in_seconds", uptime),
            ("uptime_in_days", uptime // 86400),
            ("hz", cfg.hz),
            ("executable", host.executable),
            ("config_file", host.config_file),
        ],
        "clients": [
            ("connected_clients", len(node.clients)),
            ("client_longest_output_list", 0),
            ("client_biggest_input_buf", qbuf),
            ("blocked_clients", blocked),
        ],
        "memory": [
            ("used_memory", node.mem.used),
            ("used_memory_human", _human(node.mem.used)),
            ("used_memory_rss", rss),
            ("used_memory_peak", peak),
            ("used_memory_peak_human", _human(peak)),
            ("maxmemory", cfg.maxmemory),
            ("maxmemory_human", _human(cfg.maxmemory)),
            ("mem_fragmentation_ratio", f"{rss / node.mem.used:.2f}" if node.mem.used
             else "0.00"),
            ("mem_allocator", "pymalloc"),
        ],
        "jobs": [
            ("registered_jobs", len(node.jobs)),
        ],
        "queues": [
            ("registered_queues", len(node.queues.by_name)),
        ],
        "persistence": node.persistence_info(host.aof),
        "stats": [
            ("total_connections_received", st.connections),
            ("total_commands_processed", node.ncommands),
            ("instantaneous_ops_per_sec", node.ops_per_sec()),
            ("total_net_input_bytes", node.net_in),
            ("total_net_output_bytes", node.net_out),
            ("instantaneous_input_kbps", f"{kbps_in:.2f}"),
            ("instantaneous_output_kbps", f"{kbps_out:.2f}"),
            ("rejected_connections", st.rejected_connections),
            ("acl_access_denied_auth", node.acl.fails),
            ("acl_access_denied_cmd", node.acl.denied),
            ("jobs_added", st.jobs_added),
            ("jobs_delivered", st.jobs_delivered),
            ("jobs_acked", st.jobs_acked),
            ("jobs_expired", st.jobs_expired),
            ("evicted_jobs", st.jobs_evicted),
            ("evicted_queues", st.queues_evicted),
            ("oom_refusals", st.oom_refusals),
            ("bus_malformed_messages", st.bus_malformed),
            ("latest_fork_usec", 0),
        ],
        "cpu": [
            ("used_cpu_sys", f"{host.cpu_sys:.2f}"),
            ("used_cpu_user", f"{host.cpu_user:.2f}"),
            ("used_cpu_sys_children", "0.00"),
            ("used_cpu_user_children", "0.00"),
        ],
        "groups": node.groups.info(),
        "commandstats": [
            (f"cmdstat_{name}", f"calls={st.calls},usec={st.ns // 1000},"
                                f"usec_per_call={int(st.ns) / 1000 / int(st.calls):.2f}")
            for name, st in sorted(node.cmdstats.items())
        ],
    }


_TITLES: Final = {"cpu": "CPU"}
# INFO with no section leaves these out, as Redis its optional sections: Disque's
# default INFO has no Groups (disquepy's consumer groups: ``INFO groups``, ``all``)
_NOT_DEFAULT: Final = ("groups", "commandstats")


def info_reply(node: Node, want: str, host: HostFacts, now: int) -> bytes:
    """INFO's reply: the sections ``want`` names ("default", "all", "everything" or
    one section's name)."""
    sections = info_sections(node, host, now)
    if want == "default":
        sections = {k: v for k, v in sections.items() if k not in _NOT_DEFAULT}
    elif want not in ("all", "everything"):
        sections = {want: sections[want]} if want in sections else {}
    parts = []
    for name, fields in sections.items():
        title = _TITLES.get(name, name.capitalize())
        lines = [f"# {title}"] + [f"{k}:{v}" for k, v in fields]
        parts.append("\r\n".join(lines) + "\r\n")
    return resp.bulk("\r\n".join(parts).encode())
