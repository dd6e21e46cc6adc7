"""A sandbox's egress rules and their audit (the ``Network`` service) as
models."""

from __future__ import annotations

from ..api.v1 import network_pb2
from ..models.network import AuditRecord, NetworkPolicy
from .clock import from_ms


def policy(value: network_pb2.NetworkPolicy) -> NetworkPolicy:
    return NetworkPolicy(
        rules=list(value.rules),
        secrets={secret.name: list(secret.hosts) for secret in value.secrets},
    )


def audit_record(record: network_pb2.AuditRecord) -> AuditRecord:
    return AuditRecord(
        seq=record.seq,
        at=from_ms(record.at_ms),
        protocol=record.protocol,
        name=record.name,
        addr=record.addr,
        port=record.port,
        allowed=record.allowed,
        verdict=record.verdict,
    )
