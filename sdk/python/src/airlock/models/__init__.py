"""The SDK's plain data types, in E2B's names where E2B has the concept:
``sandbox`` (infos, states, metrics, secrets), ``commands`` (results,
processes, terminal sizes), ``files`` (entries, writes, watch events,
change lists), ``code`` (executions and their results, contexts),
``network`` (policy and audit), ``ingress`` (where a guest port is
reached from outside), ``snapshot`` (named snapshots) and ``template``
(templates, build log entries, readiness checks)."""
