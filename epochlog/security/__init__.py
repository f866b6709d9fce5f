"""Who may talk to whom: certificates, TLS contexts, principals and access rules.

- `pki`: the cluster CA and the clients CA, and the certificates they issue, with the
  `cryptography` library (`epochlog dev up` and tests create them; on Kubernetes the
  operator or cert-manager does);
- `principal`: who a verified peer certificate or bearer token stands for (a broker
  by id, the operator, a user);
- `tls`: `ssl` contexts for listeners and for outgoing requests from `TlsFiles`, and
  their reload when the files are rotated;
- `access`: the access policy (bearer tokens, SCRAM credentials, rules per topic and per
  Kafka consumer group) and its decisions.

`principal` and `access` decide without I/O; `pki` and `tls` read and write files.
"""
